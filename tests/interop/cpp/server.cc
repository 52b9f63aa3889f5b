// A gRPC C++ (C-core) dm_env_rpc server of the echo world (common.h), for the interop tests.
// Prints "PORT <n>" once listening on 127.0.0.1 (port 0: the OS chooses), "CANCELLED" when a
// client goes away before its stream's status was sent, "FINISHED" when a stream ended normally,
// "STOPPED" on exit. Reads commands from stdin: "stop <ms>" shuts
// down gracefully (GOAWAY; open streams get <ms> to finish), end of input stops within 1 s.
//   --obs_size=N --action_size=N --episode=N --delay_ms=N   the world (common.h); defaults 4, 0, 0, 0
//   --finish_delay_ms=N  how long a stream takes to end once the client half-closed it (0)
//   --max_recv=BYTES   receive limit (C++'s default is 4 MiB; raised here to 64 MiB)
//   --gzip             compress answers with gzip
//   --cert=PEM --key=PEM   TLS;  --token=T   require "authorization: Bearer T"
//   --grpc.<arg>=<int> any C-core channel argument (keepalive, ping policy, ...)
#include <chrono>
#include <iostream>
#include <thread>

#include "common.h"

class Environment final : public dm_env_rpc::v1::Environment::Service {
 public:
  explicit Environment(const Options& options) : options_(options) {}

  grpc::Status Process(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<pb::EnvironmentResponse, pb::EnvironmentRequest>* stream) override {
    std::string token = options_.str("token");
    if (!token.empty()) {
      auto found = context->client_metadata().find("authorization");
      if (found == context->client_metadata().end() ||
          std::string(found->second.data(), found->second.size()) != "Bearer " + token)
        return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "a valid bearer token is required");
    }
    EchoWorld world{options_.num("obs_size", 4), options_.num("action_size"), options_.num("episode"),
                    options_.num("delay_ms")};
    pb::EnvironmentRequest request;
    while (stream->Read(&request))
      if (!stream->Write(world.answer(request))) break;
    // Time a real world may take to close once the client has half-closed its stream.
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.num("finish_delay_ms")));
    say(context->IsCancelled() ? "CANCELLED" : "FINISHED");
    return grpc::Status::OK;
  }

 private:
  const Options& options_;
};

int main(int argc, char** argv) {
  Options options(argc, argv);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options.str("cert").empty()) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({read_file(options.str("key")), read_file(options.str("cert"))});
    credentials = grpc::SslServerCredentials(ssl);
  }
  Environment service(options);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", credentials, &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.num("max_recv", 64 << 20)));
  if (options.num("gzip")) builder.SetDefaultCompressionAlgorithm(GRPC_COMPRESS_GZIP);
  options.channel_args([&](const std::string& name, int value) { builder.AddChannelArgument(name, value); });
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) { say("FAILED to listen"); return 1; }
  say("PORT " + std::to_string(port));

  std::thread([&server] {
    long grace_ms = 1000;
    for (std::string line; std::getline(std::cin, line);)
      if (line.rfind("stop ", 0) == 0) { grace_ms = std::atol(line.c_str() + 5); break; }
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
  }).detach();
  server->Wait();
  say("STOPPED");
  std::_Exit(0);   // the stdin thread may still be blocked in a read
}
