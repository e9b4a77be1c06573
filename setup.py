"""Only the C extension lives here (everything else is in pyproject.toml).

The extension is required: the data files' one record reader, the placement core (hashkit) and the
re-check's decisions are C, shared with the dumper (dumper-cpp/core, dumper-cpp/hashkit). Without a C
compiler and Python's headers (python3-dev) the install fails, naming the compiler's error, rather than
installing an agent that cannot read a dump.
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
        )
    ]
)
