from cachewarm.testing.memcached import MemcachedServer


def test_memcached_fixture_starts_a_real_server(memcached) -> None:
    srv: MemcachedServer = memcached(memory_mb=16)
    assert srv.stats()["curr_items"] == "0"
