"""fuzz_test: a libFuzzer harness checked against its seed corpus in CI.

`fuzz_test(name = "x_fuzzer", srcs = ["x_fuzzer.cc"], deps = [...],
corpus = [...])` makes the cc_test `x_fuzzer_test`: the harness
(LLVMFuzzerTestOneInput) linked with fuzz_driver.cc, the normal toolchain,
replaying every corpus file (and simple mutations of it). Fuzzing proper is
tests/fuzz/run_fuzzers.sh (clang, -fsanitize=fuzzer,address,undefined).
"""

load("//bazel:copts.bzl", "STARLING_COPTS")

def fuzz_test(name, srcs, deps, corpus, size = "small"):
    native.cc_test(
        name = name + "_test",
        size = size,
        srcs = srcs,
        args = ["$(location %s)" % f for f in corpus],
        copts = STARLING_COPTS,
        data = corpus,
        deps = deps + ["//tests/fuzz:fuzz_driver"],
    )
