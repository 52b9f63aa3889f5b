// A grpc-js client of our server: runs one stream of requests and prints a JSON result
// {answers: [payload kinds], code, details}. Options (JSON in argv[3]):
// requests: [{kind, body}], blobBytes (a CreateWorld carrying a uint8 setting that large), gzip, metadataBytes, token, ca, closeAfter (Client.close()
// once that many answers arrived, then keep writing: a graceful close mid-stream).
'use strict';
const fs = require('fs');
const grpc = require('@grpc/grpc-js');
const {definition} = require('./dm_env.js');

const address = process.argv[2];
const opts = JSON.parse(process.argv[3] || '{}');
const options = {'grpc.max_send_message_length': -1, 'grpc.max_receive_message_length': -1};
if (opts.gzip) options['grpc.default_compression_algorithm'] = 2;
const Client = grpc.makeGenericClientConstructor(definition, 'Environment');
const credentials = opts.ca ? grpc.credentials.createSsl(fs.readFileSync(opts.ca)) : grpc.credentials.createInsecure();
const client = new Client(address, credentials, options);
const metadata = new grpc.Metadata();
if (opts.metadataBytes) metadata.set('x-long-token', 't'.repeat(opts.metadataBytes));
if (opts.token) metadata.set('authorization', `Bearer ${opts.token}`);

const requests = opts.blobBytes
  ? [{create_world: {settings: {blob: {uint8s: {array: Buffer.alloc(opts.blobBytes, 65)}}}}}]
  : opts.requests.map((r) => ({[r.kind]: r.body || {}}));
const answers = [];
const call = client.Process(metadata, {deadline: Date.now() + 20000});
let next = 0;
function writeUpTo(n) {
  while (next < Math.min(n, requests.length)) call.write(requests[next++]);
  if (next === requests.length) call.end();
}
call.on('data', (response) => {
  answers.push(response.payload);
  if (opts.closeAfter && answers.length === opts.closeAfter) client.close();
  writeUpTo(answers.length + 1);
});
call.on('status', (status) => {
  console.log(JSON.stringify({answers, code: status.code, details: status.details}));
  client.close();
});
call.on('error', () => {});
writeUpTo(1);
