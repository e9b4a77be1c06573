"""Only the C extension lives here (everything else is in pyproject.toml).

`optional=True`: without a C compiler the agent installs anyway and the populator uses its
pure-Python encoder (slower: see agent/cachewarm/datapath/_speedups.c). `make test` requires the extension.
"""

import glob

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cachewarm.datapath._speedups",
            [
                "agent/cachewarm/datapath/_speedups.c",
                "agent/cachewarm/datapath/_v2plan.c",
                "agent/cachewarm/datapath/_v2send.c",
                "agent/cachewarm/datapath/_probes.c",
                "agent/cachewarm/datapath/_placement.c",
                "agent/cachewarm/datapath/_core.c",
                "agent/cachewarm/datapath/_recheck.c",
                # The placement core, shared with the C++ dumper (dumper-cpp/hashkit/hashkit.h).
                *sorted(glob.glob("dumper-cpp/hashkit/*.c")),
                # The wire rules, shared with the C++ dumper (dumper-cpp/core/cachewarm_core.h).
                *sorted(glob.glob("dumper-cpp/core/*.c")),
            ],
            include_dirs=["dumper-cpp/core"],
            extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra"],
            depends=[
                "agent/cachewarm/datapath/_v2plan.h",
                "dumper-cpp/hashkit/hashkit.h",
                "dumper-cpp/hashkit/placement.h",
                "dumper-cpp/core/cachewarm_core.h",
            ],
            optional=True,
        )
    ]
)
