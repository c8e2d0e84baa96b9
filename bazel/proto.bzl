"""starling_proto_library: .proto -> C++ (and gRPC) with the system protoc.

Bazel's native proto_library needs @com_google_protobuf, a download. Instead
a genrule runs Debian's /usr/bin/protoc (and /usr/bin/grpc_cpp_plugin when
`grpc = True`) and a cc_library wraps the output:

    starling_proto_library(
        name = "coordinator_proto",         # cc_library to depend on
        srcs = ["coordinator.proto"],
        deps = [":common_proto"],           # other starling_proto_library targets
        grpc = True,                        # also emit *.grpc.pb.{h,cc}
    )

Imports are written from the workspace root (`import "proto/common.proto";`);
well-known types (`google/protobuf/timestamp.proto`) resolve from /usr/include.
"""

load("//bazel:copts.bzl", "GENERATED_COPTS")

_PROTOC = "/usr/bin/protoc"
_GRPC_PLUGIN = "/usr/bin/grpc_cpp_plugin"

def starling_proto_library(name, srcs, deps = [], grpc = False, visibility = None, testonly = False):
    bases = [s[:-len(".proto")] for s in srcs]
    hdrs = [b + ".pb.h" for b in bases]
    cc_srcs = [b + ".pb.cc" for b in bases]
    if grpc:
        hdrs += [b + ".grpc.pb.h" for b in bases]
        cc_srcs += [b + ".grpc.pb.cc" for b in bases]

    # The .proto files of this target and of every dependency: protoc reads
    # imported files, so they must be inputs of the genrule.
    native.filegroup(
        name = name + "_files",
        srcs = srcs + [d + "_files" for d in deps],
        visibility = visibility,
        testonly = testonly,
    )

    cmd = "%s -I. -I/usr/include --cpp_out=$(GENDIR)" % _PROTOC
    if grpc:
        cmd += " --plugin=protoc-gen-grpc=%s --grpc_out=$(GENDIR)" % _GRPC_PLUGIN
    cmd += " " + " ".join(["$(location %s)" % s for s in srcs])

    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_files" for d in deps],
        outs = hdrs + cc_srcs,
        cmd = cmd,
        message = "protoc %s" % " ".join(srcs),
        testonly = testonly,
    )

    native.cc_library(
        name = name,
        srcs = cc_srcs,
        hdrs = hdrs,
        copts = GENERATED_COPTS,
        deps = deps + ["@system//:protobuf"] + (["@system//:grpcpp"] if grpc else []),
        visibility = visibility,
        testonly = testonly,
    )
