#!/usr/bin/env python3
"""Refreshes proto/etcd/ from etcd's published API module (go.etcd.io/etcd/api/v3).

The wire format is taken unchanged: every message, field, number and service. What is removed is
only what exists for Go code generation and the HTTP gateway (gogoproto and google.api.http /
openapiv2 options, and their imports), so that the files compile with no third-party protos.

Usage: python3 proto/vendor.py /path/to/go/pkg/mod/go.etcd.io/etcd/api/v3@vX.Y.Z
"""
import pathlib
import re
import sys

FILES = ["etcdserverpb/rpc.proto", "mvccpb/kv.proto", "authpb/auth.proto"]
# versionpb only declares the custom options that are stripped below.
DROP_IMPORTS = ("gogoproto/", "google/api/", "protoc-gen-openapiv2/", "etcd/api/versionpb/")


def strip_option_blocks(text: str) -> str:
    """Removes `option (ext) = ...;` statements, including multi-line `{ ... }` values."""
    out, i = [], 0
    pat = re.compile(r"^[ \t]*option\s*\(", re.M)
    while True:
        m = pat.search(text, i)
        if not m:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i : m.start()])
        j, depth = m.end(), 0
        while j < len(text):
            c = text[j]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            elif c == ";" and depth == 0:
                break
            j += 1
        i = j + 1
        if i < len(text) and text[i] == "\n":
            i += 1


def strip_field_options(text: str) -> str:
    # `[(gogoproto.nullable) = false]` and the like; standard options such as `[deprecated = true]` stay.
    text = re.sub(r"\s*\[\s*\((?:gogoproto|versionpb)\.[^\]]*\]", "", text)
    return text


def clean(text: str) -> str:
    lines = [l for l in text.splitlines(keepends=True)
             if not (l.startswith("import") and any(d in l for d in DROP_IMPORTS))]
    text = strip_field_options(strip_option_blocks("".join(lines)))
    # An rpc whose options were all removed is left as `{\n  }`; fold it to `{}`.
    text = re.sub(r"\{\s*\}", "{}", text)
    text = text.replace("// for grpc-gateway\n", "")
    return re.sub(r"\n{3,}", "\n\n", text)


def main() -> None:
    src = pathlib.Path(sys.argv[1])
    dst = pathlib.Path(__file__).resolve().parent / "etcd" / "api"
    for f in FILES:
        out = dst / f
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(clean((src / f).read_text()))
        print("wrote", out)


if __name__ == "__main__":
    main()
