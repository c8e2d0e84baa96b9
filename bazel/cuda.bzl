"""CUDA as a build option (the toolkit is found by cuda_configure.bzl).

`cuda_library` compiles `.cu` files with nvcc into a static archive wrapped in
a cc_library. Only targets built with `--config=cuda` (which sets
`--define=cuda=on`) should reach it: use `if_cuda()` in deps/srcs, or
`CUDA_ONLY` as `target_compatible_with` so `bazel build //...` skips a
CUDA-only target cleanly when CUDA is off.
"""

load("@local_cuda//:defs.bzl", "NVCC")
load("//bazel:copts.bzl", "STARLING_COPTS")

# Give as target_compatible_with: the target exists only with --config=cuda.
CUDA_ONLY = select({
    "//bazel:cuda_on": [],
    "//conditions:default": ["//bazel:cuda_enabled"],
})

def if_cuda(with_cuda, without_cuda = []):
    return select({
        "//bazel:cuda_on": with_cuda,
        "//conditions:default": without_cuda,
    })

# sm_80 (A100), sm_90 (H100/H200), plus PTX for newer parts.
_NVCC_ARCH_FLAGS = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

def cuda_library(name, srcs, hdrs = [], deps = [], visibility = None, testonly = False):
    """Compiles `.cu` srcs with nvcc into lib<name>.a, wrapped as cc_library `name`."""
    archive = "lib%s_cu.a" % name
    cmd = " ".join([
        "%s -lib -O3 -std=c++17" % NVCC,
        "-Xcompiler=-fPIC,-Wall,-Wextra",
        "-I. -I$(GENDIR)",
    ] + _NVCC_ARCH_FLAGS + [
        "-o $@",
        " ".join(["$(location %s)" % s for s in srcs]),
    ])
    native.genrule(
        name = name + "_nvcc",
        srcs = srcs + hdrs,
        outs = [archive],
        cmd = cmd,
        message = "nvcc %s" % " ".join(srcs),
        target_compatible_with = CUDA_ONLY,
        testonly = testonly,
    )
    native.cc_library(
        name = name,
        srcs = [archive],
        hdrs = hdrs,
        copts = STARLING_COPTS,
        linkstatic = True,
        deps = deps + ["@local_cuda//:cudart_static"],
        target_compatible_with = CUDA_ONLY,
        visibility = visibility,
        testonly = testonly,
    )
