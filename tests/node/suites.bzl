"""A daemon suite and its second target over the fabric transport."""

# Every daemon of the second target writes to its peers through the fabric
# path: libfabric's tcp provider here, following verbs' registration rules
# (node_cluster.h reads STARLING_TEST_DAEMON_FLAGS).
FABRIC_DAEMON_FLAGS = "--transport=fabric --fabric_provider=tcp --fabric_verbs_style"

def node_suite(name, fabric_filter = None, **kwargs):
    """cc_test `name`, and `name`_fabric: the same cases over the fabric.

    Args:
      name: the suite's test name.
      fabric_filter: a --gtest_filter for the fabric target (None: all).
      **kwargs: cc_test's attributes.
    """
    native.cc_test(name = name, **kwargs)
    args = list(kwargs.pop("args", []))
    if fabric_filter:
        args.append("--gtest_filter=" + fabric_filter)
    env = dict(kwargs.pop("env", {}))
    env["STARLING_TEST_DAEMON_FLAGS"] = FABRIC_DAEMON_FLAGS

    # The kernels are the first target's to check: the portable-kernel rerun
    # (tests/run_all.sh) skips this one.
    tags = list(kwargs.pop("tags", []))
    if "kernel_independent" not in tags:
        tags.append("kernel_independent")
    native.cc_test(
        name = name + "_fabric",
        args = args,
        env = env,
        tags = tags,
        **kwargs
    )
