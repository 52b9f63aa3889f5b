#!/usr/bin/env bash
# The gRPC C++ peers of tests/interop/test_interop_cpp.py: installs Debian's gRPC C++ (when missing) and
# builds tests/interop/cpp into DMRPC_CPP_PEER_DIR (default ~/.cache/dmrpc-cpp), skipping the
# build when neither the sources, the protos nor the gRPC version changed. Idempotent.
# Prints the directory holding dmrpc_cpp_server and dmrpc_cpp_client on stdout (all else on
# stderr), so that (two lines, so that set -e sees a failure):
#   DMRPC_CPP_PEER_DIR="$(.ci/install_cpp_peer.sh)"
#   export DMRPC_CPP_PEER_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out="${DMRPC_CPP_PEER_DIR:-$HOME/.cache/dmrpc-cpp}"
# Pinned to Debian 12 (bookworm)'s gRPC C++ 1.51.1 and protobuf 3.21.12: the tests lean on this
# C-core's habits (keepalive PINGs at most about once a second, its BDP probes). A pin that apt
# does not offer (another Debian release) falls back to apt's candidate, with a warning.
pins=(libgrpc++-dev=1.51.1-3+b1 protobuf-compiler-grpc=1.51.1-3+b1 libprotobuf-dev=3.21.12-3+deb12u1
      protobuf-compiler=3.21.12-3+deb12u1 pkg-config g++ make)
packages=("${pins[@]%%=*}")
missing=()
for pin in "${pins[@]}"; do
  dpkg-query -W -f='${Status}' "${pin%%=*}" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pin")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  wanted=()
  for pin in "${missing[@]}"; do
    if [ "$pin" = "${pin%%=*}" ] || apt-cache madison "${pin%%=*}" | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep -qxF "${pin#*=}"; then
      wanted+=("$pin")
    else
      echo "install_cpp_peer.sh: apt offers no ${pin}; installing its candidate" >&2
      wanted+=("${pin%%=*}")
    fi
  done
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${wanted[@]}" >&2
fi

# What the binaries are built from: the C++ sources, the messages, and the library's version.
stamp=$( { cat tests/interop/cpp/Makefile tests/interop/cpp/*.h tests/interop/cpp/*.cc tests/interop/cpp/*.proto \
             protos/dmrpc_gym/protocol/_proto/dm_env_rpc.proto
           dpkg-query -W "${packages[@]}"; } | sha256sum | cut -d' ' -f1)
if [ -x "$out/dmrpc_cpp_server" ] && [ -x "$out/dmrpc_cpp_client" ] && [ "$(cat "$out/sources.sha256" 2>/dev/null)" = "$stamp" ]; then
  echo "gRPC C++ peers up to date in $out" >&2
else
  echo "building the gRPC C++ peers into $out" >&2
  mkdir -p "$out"
  rm -rf "$out/build" "$out/sources.sha256"
  start=$SECONDS
  make -C tests/interop/cpp --no-print-directory OUT="$out/build" -j"$(nproc)" >&2
  cp "$out/build/dmrpc_cpp_server" "$out/build/dmrpc_cpp_client" "$out/"
  rm -rf "$out/build"
  echo "$stamp" > "$out/sources.sha256"
  echo "built in $((SECONDS - start)) s" >&2
fi
echo "$out"
