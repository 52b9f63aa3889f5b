#!/usr/bin/env bash
# The grpc-go peers of tests/interop/test_interop_go.py: installs Debian's Go toolchain, grpc-go and
# protobuf-go with their code generators, generates the Go code of protos/ and builds
# tests/interop/go/{server,client,health} offline (GOPATH mode over /usr/share/gocode: no module
# proxy; health uses grpc-go's own grpc_health_v1 package). Idempotent: rebuilds only when the
# sources or the packages changed. Prints the folder holding the three binaries (dmrpc-go-server,
# dmrpc-go-client, dmrpc-go-health); export it as DMRPC_GO_PEER_DIR.
#   usage: .ci/install_go_peer.sh [DIR]     (default: ${DMRPC_GO_PEER_DIR:-$HOME/.cache/dmrpc-go})
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-${DMRPC_GO_PEER_DIR:-$HOME/.cache/dmrpc-go}}"

# Pinned to Debian 12 (bookworm): Go 1.19, grpc-go 1.33.3, protobuf-go 1.28.1, protoc 3.21.12.
# grpc-go 1.33 marshals through github.com/golang/protobuf: its 1.5 package (a wrapper of
# protobuf-go), not the 1.3 one that Debian may pick for grpc-go, whose old marshaler crashes on
# protoc-gen-go 1.28 code. A pin apt does not offer (another Debian release) falls back to apt's
# candidate, with a warning; $DIR/versions records what was built with.
pins=(golang-go=2:1.19~1 golang-google-grpc-dev=1.33.3-2 golang-google-protobuf-dev=1.28.1-3
      golang-github-golang-protobuf-1-5-dev=1.5.2-3 protoc-gen-go=1.28.1-3+b2 protoc-gen-go-grpc=1.33.3-2+b4
      protobuf-compiler=3.21.12-3+deb12u1)
packages=("${pins[@]%%=*}")
missing=()
for pin in "${pins[@]}"; do
  dpkg-query -W -f='${Status}' "${pin%%=*}" 2>/dev/null | grep -q "install ok installed" || missing+=("$pin")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  wanted=()
  for pin in "${missing[@]}"; do
    if apt-cache madison "${pin%%=*}" | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep -qxF "${pin#*=}"; then
      wanted+=("$pin")
    else
      echo "install_go_peer.sh: apt offers no ${pin}; installing its candidate" >&2
      wanted+=("${pin%%=*}")
    fi
  done
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${wanted[@]}" >&2
fi

# What the build depends on: our sources, the protos and the packages' versions.
stamp=$( { cat "$root"/tests/interop/go/environment.proto "$root"/tests/interop/go/*/main.go \
                 "$root"/protos/dmrpc_gym/protocol/_proto/dm_env_rpc.proto;
           dpkg-query -W "${packages[@]}"; } | sha256sum | cut -d' ' -f1)
if [ -x "$dir/dmrpc-go-server" ] && [ -x "$dir/dmrpc-go-client" ] && [ -x "$dir/dmrpc-go-health" ] \
   && [ "$(cat "$dir/stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "$dir"
  exit 0
fi

mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src="$work/src/dmrpcgo"
mkdir -p "$src/pb" "$src/envpb" "$src/server" "$src/client" "$src/health"
msg=dmrpc_gym/protocol/_proto/dm_env_rpc.proto
mkdir -p "$work/gen"
protoc -I "$root/protos" -I "$root/tests/interop/go" \
  --go_out="$work/gen" --go_opt=paths=source_relative --go_opt="M$msg=dmrpcgo/pb" \
  --go-grpc_out="$work/gen" --go-grpc_opt=paths=source_relative --go-grpc_opt="M$msg=dmrpcgo/pb" \
  "$msg" environment.proto
cp "$work"/gen/dmrpc_gym/protocol/_proto/dm_env_rpc.pb.go "$src/pb/"
cp "$work"/gen/environment*.pb.go "$src/envpb/"
cp "$root/tests/interop/go/server/main.go" "$src/server/"
cp "$root/tests/interop/go/client/main.go" "$src/client/"
cp "$root/tests/interop/go/health/main.go" "$src/health/"

export GO111MODULE=off GOPATH="$work:/usr/share/gocode" GOCACHE="$dir/gocache" GOFLAGS=
(cd "$src/server" && go build -o "$dir/dmrpc-go-server.new" .) >&2
(cd "$src/client" && go build -o "$dir/dmrpc-go-client.new" .) >&2
(cd "$src/health" && go build -o "$dir/dmrpc-go-health.new" .) >&2
mv "$dir/dmrpc-go-server.new" "$dir/dmrpc-go-server"
mv "$dir/dmrpc-go-client.new" "$dir/dmrpc-go-client"
mv "$dir/dmrpc-go-health.new" "$dir/dmrpc-go-health"
{ go version; dpkg-query -W "${packages[@]}"; } > "$dir/versions"
echo "$stamp" > "$dir/stamp"
echo "$dir"
