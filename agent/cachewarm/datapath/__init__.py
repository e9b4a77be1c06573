"""The data path: the bytes of a warm, from the dump directory to the destination memcached.

- `format.py`      data format v1: names, header/trailer, the record walker, section 3's checks, DONE
- `writer.py`      a format v1 writer for tests and fault injection (the dumper writes in production)
- `encode.py`      records -> meta-protocol set commands (plain vs base64 keys, TTLs over 30 days);
                   `_speedups.c` is its C twin and takes its constants from it
- `wire.py`        how a key is named to memcached (plain, base64, binary), `DestinationUnavailable`
- `meta.py`        the meta-protocol client (pipelined writes and reads); `metadump.py` key listing
- `nodes.py`       a memcached node as named (`HOST[:PORT]`), parsed and resolved
- `routing.py`     how keys spread over several destinations: EVCache's ring or `--placement`, both
                   hashkit descriptions the C extension routes with (`placement/`)
- `dumper.py`      `cachewarm-dump` from Python: its command line and progress lines
- `populate/`      the populator: `config`, `worker` (one file), `state` (consumed files), `loop`
- `pool.py`        the process pools the populator, `warm` and `verify` use
- `remount.py`     seeing the writer's new files on a read-only mount
- `warm.py`, `verify.py`, `demo.py` and `commands.py`: the `cachewarm warm|populate|verify|demo` commands
- `warm_config.py`, `warm_summary.py`, `warm_check.py`, `workdir.py`, `warm_errors.py`: what every mode of
                   the warm shares (what it is told, what it reports, the target check, its work
                   directory, what it fails with); `stream.py`, `s3warm.py`: its other two modes
"""
