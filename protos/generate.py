"""Regenerate dmrpc_gym/protocol/_proto/*_pb2.py from the .proto files beside this script.

    python protos/generate.py            # write into the package
    python protos/generate.py --out DIR  # write elsewhere (the freshness test)

Needs grpcio-tools (in the `test` extra). Only message modules are generated:
the gRPC method is bound by path in dmrpc_gym/wire.py, not by generated stubs.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
PROTOS = sorted(HERE.glob("dmrpc_gym/protocol/_proto/*.proto"))


def generate(out: pathlib.Path) -> list[pathlib.Path]:
    """Run protoc over every .proto under protos/ and return the files written."""
    import grpc_tools
    from grpc_tools import protoc

    include = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    args = ["protoc", f"-I{HERE}", f"-I{include}", f"--python_out={out}"]
    args += [str(p.relative_to(HERE)) for p in PROTOS]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {PROTOS}")
    return sorted(out.glob("dmrpc_gym/protocol/_proto/*_pb2.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=HERE.parent)
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
