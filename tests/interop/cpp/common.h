// What the C++ peers of the interop tests share: "--name=value" options, gRPC channel arguments
// given as "--grpc.<arg>=<int>", lines on stdout, and the echo world (as tests/interop/dm_env.js).
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "environment.grpc.pb.h"

namespace pb = dmrpc_gym::v1;

struct Options {
  std::map<std::string, std::string> values;

  Options(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0) { std::fprintf(stderr, "not an option: %s\n", argv[i]); std::exit(2); }
      size_t eq = arg.find('=');
      values[arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
          eq == std::string::npos ? "1" : arg.substr(eq + 1);
    }
  }
  std::string str(const std::string& name, const std::string& otherwise = "") const {
    auto it = values.find(name);
    return it == values.end() ? otherwise : it->second;
  }
  long num(const std::string& name, long otherwise = 0) const {
    auto it = values.find(name);
    return it == values.end() ? otherwise : std::atol(it->second.c_str());
  }
  // "--grpc.keepalive_time_ms=100" sets the channel argument grpc.keepalive_time_ms to 100.
  template <class Set> void channel_args(Set set) const {
    for (const auto& [name, value] : values)
      if (name.rfind("grpc.", 0) == 0) set(name, std::atoi(value.c_str()));
  }
};

// One line on stdout at once, whichever thread says it.
inline void say(const std::string& line) {
  static std::mutex lock;
  std::lock_guard<std::mutex> hold(lock);
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

inline std::string read_file(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

// The bytes of the test's big uint8 action: i-th byte (i * 31 + 7) mod 256.
inline unsigned char blob_byte(long i) { return static_cast<unsigned char>(i * 31 + 7); }

// The echo world: observation "obs" (uid 1) is obs_size bytes all equal to action "act" (uid 1,
// int32 in [0, 9]); "reward" (uid 3) is that value too. With action_size > 0, action "blob"
// (uid 2) is that many uint8s and observation "blob_sum" (uid 2, int64) their sum. With
// episode > 0, every episode-th step is TERMINATED. With delay_ms > 0, each step but the first
// after joining takes that long.
struct EchoWorld {
  long obs_size, action_size, episode, delay_ms = 0, steps = 0;

  void specs(pb::ActionObservationSpecs* out) const {
    auto& obs = (*out->mutable_observations())[1];
    obs.set_name("obs");
    obs.set_dtype(pb::UINT8);
    obs.add_shape(static_cast<int>(obs_size));
    auto& reward = (*out->mutable_observations())[3];
    reward.set_name("reward");
    reward.set_dtype(pb::FLOAT);
    auto& act = (*out->mutable_actions())[1];
    act.set_name("act");
    act.set_dtype(pb::INT32);
    act.mutable_min()->mutable_int32s()->add_array(0);
    act.mutable_max()->mutable_int32s()->add_array(9);
    if (action_size > 0) {
      auto& blob = (*out->mutable_actions())[2];
      blob.set_name("blob");
      blob.set_dtype(pb::UINT8);
      blob.add_shape(static_cast<int>(action_size));
      auto& sum = (*out->mutable_observations())[2];
      sum.set_name("blob_sum");
      sum.set_dtype(pb::INT64);
    }
  }

  pb::EnvironmentResponse answer(const pb::EnvironmentRequest& request) {
    pb::EnvironmentResponse out;
    switch (request.payload_case()) {
      case pb::EnvironmentRequest::kCreateWorld: out.mutable_create_world()->set_world_name("echo"); break;
      case pb::EnvironmentRequest::kJoinWorld: steps = 0; specs(out.mutable_join_world()->mutable_specs()); break;
      case pb::EnvironmentRequest::kReset: steps = 0; specs(out.mutable_reset()->mutable_specs()); break;
      case pb::EnvironmentRequest::kResetWorld: out.mutable_reset_world(); break;
      case pb::EnvironmentRequest::kLeaveWorld: out.mutable_leave_world(); break;
      case pb::EnvironmentRequest::kDestroyWorld: out.mutable_destroy_world(); break;
      case pb::EnvironmentRequest::kStep: step(request.step(), out.mutable_step()); break;
      default:
        out.mutable_error()->set_code(12);   // UNIMPLEMENTED
        out.mutable_error()->set_message("the echo world serves no such request");
    }
    return out;
  }

  void step(const pb::StepRequest& request, pb::StepResponse* out) {
    if (delay_ms > 0 && steps > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    const auto& actions = request.actions();
    auto act = actions.find(1);
    int value = act != actions.end() && act->second.int32s().array_size() ? act->second.int32s().array(0) : 0;
    ++steps;
    out->set_state(episode > 0 && steps % episode == 0 ? pb::TERMINATED : pb::RUNNING);
    auto wanted = [&](uint64_t uid) {
      if (request.requested_observations_size() == 0) return true;
      for (uint64_t r : request.requested_observations()) if (r == uid) return true;
      return false;
    };
    auto& obs = *out->mutable_observations();
    if (wanted(1)) {
      obs[1].add_shape(static_cast<int>(obs_size));
      obs[1].mutable_uint8s()->set_array(std::string(obs_size, static_cast<char>(value)));
    }
    if (wanted(3)) obs[3].mutable_floats()->add_array(static_cast<float>(value));
    auto blob = actions.find(2);
    if (action_size > 0 && wanted(2)) {
      long sum = 0;
      if (blob != actions.end())
        for (unsigned char c : blob->second.uint8s().array()) sum += c;
      obs[2].mutable_int64s()->add_array(sum);
    }
  }
};
