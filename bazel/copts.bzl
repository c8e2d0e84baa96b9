"""Compiler options shared by every Starling target."""

# Our own code compiles warning-free. Only //bazel and generated code (protoc
# output, see proto.bzl) may relax this.
STARLING_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-sign-compare",
]

# Generated protobuf/gRPC sources are not ours: no -Werror there.
GENERATED_COPTS = [
    "-Wno-unused-parameter",
]
