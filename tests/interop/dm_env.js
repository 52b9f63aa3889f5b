// The dm_env_rpc messages (from the repository's protos/) and the echo world, shared by the
// grpc-js peers of the interop tests. Modules come from NODE_PATH (DMRPC_NODE_MODULES).
'use strict';
const path = require('path');
const protobuf = require('protobufjs');

const root = new protobuf.Root();
root.resolvePath = (origin, target) => {
  if (target.startsWith('google/')) return target;          // protobufjs bundles the well-known types
  return path.join(__dirname, '..', '..', 'protos', target);
};
root.loadSync('dmrpc_gym/protocol/_proto/dm_env_rpc.proto', {keepCase: true});
const Request = root.lookupType('dmrpc_gym.v1.EnvironmentRequest');
const Response = root.lookupType('dmrpc_gym.v1.EnvironmentResponse');

// The method path stays dm_env_rpc's: the protos are wire-identical to the official ones.
const METHOD = '/dm_env_rpc.v1.Environment/Process';
const definition = {
  Process: {
    path: METHOD, requestStream: true, responseStream: true,
    requestSerialize: (m) => Buffer.from(Request.encode(Request.fromObject(m)).finish()),
    requestDeserialize: (b) => Request.toObject(Request.decode(b), {oneofs: true}),
    responseSerialize: (m) => Buffer.from(Response.encode(Response.fromObject(m)).finish()),
    responseDeserialize: (b) => Response.toObject(Response.decode(b), {oneofs: true}),
  },
};

function specs(obsSize) {
  return {
    observations: {1: {name: 'obs', dtype: 'UINT8', shape: [obsSize]}},
    actions: {1: {name: 'act', dtype: 'INT32', min: {int32s: {array: [0]}}, max: {int32s: {array: [9]}}}},
  };
}

// The echo world: the observation is obsSize bytes, all equal to the last action.
function answer(request, obsSize) {
  switch (request.payload) {
    case 'create_world': return {create_world: {world_name: 'echo'}};
    case 'join_world': return {join_world: {specs: specs(obsSize)}};
    case 'reset': return {reset: {specs: specs(obsSize)}};
    case 'step': {
      const act = Object.values(request.step.actions || {})[0];   // uint64 map keys decode as 8-byte strings
      const value = act && act.int32s && act.int32s.array.length ? act.int32s.array[0] : 0;
      return {step: {state: 'RUNNING', observations: {1: {shape: [obsSize], uint8s: {array: Buffer.alloc(obsSize, value)}}}}};
    }
    default: return {error: {code: 12, message: `${request.payload} is not served here`}};
  }
}

module.exports = {definition, answer, METHOD};
