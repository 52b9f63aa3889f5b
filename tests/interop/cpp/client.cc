// A gRPC C++ (C-core) dm_env_rpc client for the interop tests. Runs --streams concurrent streams
// on one channel; each creates a world, joins it, steps --steps times, leaves and destroys it,
// then half-closes and reads the status. Prints "STEP <stream> <t>" after each step and, last,
// "RESULT [{...} per stream]" (code, details, answers, obs_ok, obs_bytes, blob_ok, world).
//   --address=HOST:PORT  --streams=N (1)  --steps=N (3)  --deadline_ms=N (30000)
//   --pause_ms=N  idle that long before step --pause_at (steps / 2): a quiet stream
//   --action_size=N  also send a uint8 action of that many bytes (any uint8 action spec)
//   --max_recv=BYTES  receive limit (C++'s default is 4 MiB; raised here to 64 MiB)
//   --setting.NAME=INT  an int64 world setting in CreateWorld
//   --metadata_bytes=N  also send a header x-long-token of N bytes
//   --gzip  --ca=PEM (TLS)  --token=T  --grpc.<arg>=<int> any C-core channel argument
// "states" has a letter per step: R running, T terminated, I interrupted. The first step of an
// episode (after joining, or after T) may answer the reset's observation, so obs_ok skips it.
#include <chrono>
#include <thread>
#include <vector>

#include "common.h"

using Stream = grpc::ClientReaderWriter<pb::EnvironmentRequest, pb::EnvironmentResponse>;

struct Outcome {
  int code = -1;
  std::string details, world, states;
  int answers = 0;
  bool obs_ok = true, blob_ok = true;
  long obs_bytes = 0;
};

static std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c < 0x20) { char buf[8]; std::snprintf(buf, sizeof buf, "\\u%04x", c); out += buf; }
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

// A tensor for each action spec: integers take `value`; a uint8 array takes the blob's bytes.
static void fill_actions(const pb::ActionObservationSpecs& specs, int value, pb::StepRequest* step, long* blob_sum) {
  for (const auto& [uid, spec] : specs.actions()) {
    long count = 1;
    for (int d : spec.shape()) count *= d < 0 ? 1 : d;
    pb::Tensor& tensor = (*step->mutable_actions())[uid];
    for (int d : spec.shape()) tensor.add_shape(d < 0 ? 1 : d);
    switch (spec.dtype()) {
      case pb::UINT8: {
        std::string bytes(count, static_cast<char>(value));
        if (count > 1) {
          *blob_sum = 0;
          for (long i = 0; i < count; ++i) bytes[i] = static_cast<char>(blob_byte(i)), *blob_sum += blob_byte(i);
        }
        tensor.mutable_uint8s()->set_array(bytes);
        break;
      }
      case pb::INT32: for (long i = 0; i < count; ++i) tensor.mutable_int32s()->add_array(value); break;
      case pb::INT64: for (long i = 0; i < count; ++i) tensor.mutable_int64s()->add_array(value); break;
      case pb::FLOAT: for (long i = 0; i < count; ++i) tensor.mutable_floats()->add_array(value); break;
      case pb::DOUBLE: for (long i = 0; i < count; ++i) tensor.mutable_doubles()->add_array(value); break;
      default: std::fprintf(stderr, "action %s: dtype %d not supported here\n", spec.name().c_str(), spec.dtype());
    }
  }
}


// An idle pause in which C-core still reads and writes (keepalive and BDP PINGs, their ACKs,
// GOAWAY): a sync client does I/O only while some thread waits on gRPC, as a blocked Read would;
// a sleeping thread would freeze the connection instead.
static void idle(grpc::Channel* channel, long ms) {
  auto until = std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::system_clock::now() < until) channel->WaitForStateChange(channel->GetState(false), until);
}

static Outcome episode(grpc::Channel* channel, dm_env_rpc::v1::Environment::Stub* stub, const Options& options,
                       int index) {
  Outcome out;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(options.num("deadline_ms", 30000)));
  if (!options.str("token").empty() && options.str("ca").empty())   // over TLS: call credentials (main)
    context.AddMetadata("authorization", "Bearer " + options.str("token"));
  if (options.num("gzip")) context.set_compression_algorithm(GRPC_COMPRESS_GZIP);
  if (long size = options.num("metadata_bytes")) context.AddMetadata("x-long-token", std::string(size, 't'));
  std::unique_ptr<Stream> stream = stub->Process(&context);
  pb::EnvironmentResponse answer;
  auto exchange = [&](const pb::EnvironmentRequest& request) {
    if (!stream->Write(request) || !stream->Read(&answer)) return false;
    ++out.answers;
    if (answer.has_error()) out.details = "error answer: " + answer.error().message();
    return !answer.has_error();
  };

  long steps = options.num("steps", 3), pause_at = options.num("pause_at", steps / 2);
  pb::EnvironmentRequest request;
  for (const auto& [name, value] : options.values)
    if (name.rfind("setting.", 0) == 0)
      (*request.mutable_create_world()->mutable_settings())[name.substr(8)].mutable_int64s()->add_array(
          std::atol(value.c_str()));
  request.mutable_create_world();
  bool going = exchange(request);
  pb::ActionObservationSpecs specs;
  if (going) {
    out.world = answer.create_world().world_name();
    request.mutable_join_world()->set_world_name(out.world);
    going = exchange(request);
    specs = answer.join_world().specs();
  }
  for (long t = 0; going && t < steps; ++t) {
    if (t == pause_at && options.num("pause_ms")) idle(channel, options.num("pause_ms"));
    int value = static_cast<int>((index * 3 + t) % 10);
    long blob_sum = -1;
    request.Clear();
    fill_actions(specs, value, request.mutable_step(), &blob_sum);
    for (const auto& observation : specs.observations())
      request.mutable_step()->add_requested_observations(observation.first);
    if (!(going = exchange(request))) break;
    bool first = out.states.empty() || out.states.back() != 'R';
    pb::EnvironmentStateType state = answer.step().state();
    out.states += state == pb::RUNNING ? 'R' : state == pb::TERMINATED ? 'T' : state == pb::INTERRUPTED ? 'I' : '?';
    bool seen = false, summed = false;
    for (const auto& [uid, tensor] : answer.step().observations()) {
      const std::string& name = specs.observations().at(uid).name();
      if (name == "obs") {
        const std::string& bytes = tensor.uint8s().array();
        out.obs_bytes = static_cast<long>(bytes.size());
        seen = true;
        bool echoed = bytes.find_first_not_of(static_cast<char>(value)) == std::string::npos;
        out.obs_ok = out.obs_ok && !bytes.empty() && (first || echoed);
      } else if (name == "blob_sum" && blob_sum >= 0 && !first) {
        summed = true;
        out.blob_ok = out.blob_ok && tensor.int64s().array_size() == 1 && tensor.int64s().array(0) == blob_sum;
      }
    }
    out.obs_ok = out.obs_ok && (seen || first);
    out.blob_ok = out.blob_ok && (summed || first || blob_sum < 0);
    say("STEP " + std::to_string(index) + " " + std::to_string(t));
  }
  if (going) {
    request.mutable_leave_world();
    going = exchange(request);
  }
  if (going) {
    request.mutable_destroy_world()->set_world_name(out.world);
    exchange(request);
  }
  stream->WritesDone();
  grpc::Status status = stream->Finish();
  out.code = status.error_code();
  if (!status.ok() || out.details.empty()) out.details = status.error_message();
  return out;
}

int main(int argc, char** argv) {
  Options options(argc, argv);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.str("ca").empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = read_file(options.str("ca"));
    credentials = grpc::SslCredentials(ssl);
    if (!options.str("token").empty())   // sent as "authorization: Bearer <token>"
      credentials = grpc::CompositeChannelCredentials(credentials, grpc::AccessTokenCredentials(options.str("token")));
  }
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(static_cast<int>(options.num("max_recv", 64 << 20)));
  options.channel_args([&](const std::string& name, int value) { arguments.SetInt(name, value); });
  auto channel = grpc::CreateCustomChannel(options.str("address"), credentials, arguments);
  auto stub = dm_env_rpc::v1::Environment::NewStub(channel);

  int streams = static_cast<int>(options.num("streams", 1));
  std::vector<Outcome> outcomes(streams);
  std::vector<std::thread> threads;
  for (int i = 0; i < streams; ++i)
    threads.emplace_back([&, i] { outcomes[i] = episode(channel.get(), stub.get(), options, i); });
  for (auto& thread : threads) thread.join();

  std::string line = "RESULT [";
  for (int i = 0; i < streams; ++i) {
    const Outcome& o = outcomes[i];
    auto boolean = [](bool b) { return std::string(b ? "true" : "false"); };
    line += std::string(i ? ", " : "") + "{\"code\": " + std::to_string(o.code) + ", \"details\": " + quoted(o.details) +
            ", \"answers\": " + std::to_string(o.answers) + ", \"obs_ok\": " + boolean(o.obs_ok) +
            ", \"obs_bytes\": " + std::to_string(o.obs_bytes) + ", \"blob_ok\": " + boolean(o.blob_ok) +
            ", \"world\": " + quoted(o.world) + ", \"states\": " + quoted(o.states) + "}";
  }
  say(line + "]");
  return 0;
}
