from cachewarm.testing.memcached import MemcachedServer


def test_memcached_fixture_starts_a_real_server(memcached) -> None:
    srv: MemcachedServer = memcached(memory_mb=16)
    assert srv.stats()["curr_items"] == "0"


def test_the_dumpers_readme_names_every_source_file() -> None:
    """dumper-cpp/README.md's layout tables are how a newcomer finds a file: each one is named there
    (hashkit's one file per hash function as a family)."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "dumper-cpp"
    readme = (root / "README.md").read_text()
    unnamed = [
        f"{d}/{f.name}"
        for d in ("src", "core", "tools")
        for f in sorted((root / d).iterdir())
        if f.suffix in (".c", ".cc", ".h") and f.stem not in readme
    ]
    assert not unnamed, f"not in dumper-cpp/README.md's layout: {unnamed}"
