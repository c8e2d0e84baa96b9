"""A daemon suite and its second and third targets over the fabric and shm."""

# Every daemon of the _fabric target writes to its peers through the fabric
# path: libfabric's tcp provider here, following verbs' registration rules;
# every daemon of the _shm target through shared-memory rings (all on this
# host). The first target runs over TCP (node_cluster.h's base flags; it
# reads STARLING_TEST_DAEMON_FLAGS after them).
FABRIC_DAEMON_FLAGS = "--transport=fabric --fabric_provider=tcp --fabric_verbs_style"
SHM_DAEMON_FLAGS = "--transport=shm"

def _variant(name, suffix, flags, gtest_filter, kwargs):
    # The suite's own binary, run by run_suite.sh: compiled and linked once.
    args = ["$(rootpath :%s)" % name] + list(kwargs.get("args", []))
    if gtest_filter:
        args.append("--gtest_filter=" + gtest_filter)
    env = dict(kwargs.get("env", {}))
    env["STARLING_TEST_DAEMON_FLAGS"] = flags

    # The kernels are the first target's to check: the portable-kernel rerun
    # (tests/run_all.sh) skips this one.
    tags = list(kwargs.get("tags", []))
    if "kernel_independent" not in tags:
        tags.append("kernel_independent")
    native.sh_test(
        name = name + suffix,
        srcs = ["run_suite.sh"],
        args = args,
        data = [":" + name],
        env = env,
        tags = tags,
        size = kwargs.get("size", "medium"),
        timeout = kwargs.get("timeout"),
    )

def node_suite(name, fabric_filter = None, shm_filter = None, **kwargs):
    """cc_test `name` (TCP), `name`_fabric and `name`_shm: the same cases.

    Args:
      name: the suite's test name.
      fabric_filter: a --gtest_filter for the fabric target (None: all).
      shm_filter: a --gtest_filter for the shm target (None: all).
      **kwargs: cc_test's attributes.
    """
    native.cc_test(name = name, **kwargs)
    _variant(name, "_fabric", FABRIC_DAEMON_FLAGS, fabric_filter, kwargs)
    _variant(name, "_shm", SHM_DAEMON_FLAGS, shm_filter, kwargs)
