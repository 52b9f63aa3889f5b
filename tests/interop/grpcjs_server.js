// A grpc-js server of the echo world, for our client: prints "PORT <n>", serves until stdin closes.
// Options (JSON in argv[2]): keepaliveMs, keepaliveTimeoutMs, obsSize, cert, key, gzip.
'use strict';
const fs = require('fs');
const grpc = require('@grpc/grpc-js');
const {definition, answer} = require('./dm_env.js');

const opts = JSON.parse(process.argv[2] || '{}');
const options = {'grpc.max_metadata_size': 1 << 20, 'grpc.max_receive_message_length': -1};
if (opts.keepaliveMs) {
  options['grpc.keepalive_time_ms'] = opts.keepaliveMs;
  options['grpc.keepalive_timeout_ms'] = opts.keepaliveTimeoutMs || 1000;
  options['grpc.keepalive_permit_without_calls'] = 1;
}
if (opts.gzip) options['grpc.default_compression_algorithm'] = 2;
const server = new grpc.Server(options);
server.addService(definition, {
  Process(call) {
    call.on('data', (request) => call.write(answer(request, opts.obsSize || 4)));
    call.on('end', () => call.end());
    call.on('error', () => {});
  },
});
const credentials = opts.cert
  ? grpc.ServerCredentials.createSsl(null, [{cert_chain: fs.readFileSync(opts.cert), private_key: fs.readFileSync(opts.key)}])
  : grpc.ServerCredentials.createInsecure();
server.bindAsync('127.0.0.1:0', credentials, (err, port) => {
  if (err) { console.error(err.message); process.exit(1); }
  console.log(`PORT ${port}`);
});
process.stdin.on('end', () => server.tryShutdown(() => process.exit(0)));
process.stdin.resume();
