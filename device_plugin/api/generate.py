"""Regenerate the committed gRPC stubs from deviceplugin_v1beta1.proto (grpcio-tools, a build-time tool).

    python -m device_plugin.api.generate

The stubs are committed so that an install needs only grpcio and protobuf at run time; a unit test
regenerates them and fails when they no longer match the .proto. The .proto is compiled by its path
from the repository root, so the generated service module imports its messages as
`device_plugin.api.deviceplugin_v1beta1_pb2` (a package import, not a top-level one).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

API_DIR = Path(__file__).resolve().parent
ROOT = API_DIR.parent.parent
PROTO = API_DIR / "deviceplugin_v1beta1.proto"
STUBS = ("deviceplugin_v1beta1_pb2.py", "deviceplugin_v1beta1_pb2_grpc.py")


def generated_stubs() -> dict[str, str]:
    """File name -> text of each stub as grpcio-tools generates it from PROTO now."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as out:
        argv = ["grpc_tools.protoc", f"-I{ROOT}", f"--python_out={out}", f"--grpc_python_out={out}",
                str(PROTO.relative_to(ROOT))]
        if protoc.main(argv) != 0:
            raise SystemExit(f"generate: error: protoc failed on {PROTO}")
        folder = Path(out, PROTO.parent.relative_to(ROOT))
        return {name: (folder / name).read_text() for name in STUBS}


def main() -> int:
    for name, text in generated_stubs().items():
        (API_DIR / name).write_text(text)
        print(f"wrote {API_DIR / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
