"""The child process wrapper: long-lived children survive, several waiters agree."""

import signal
import sys
import time

import trio

from sidecar.child import Child


async def test_the_child_outlives_trios_idle_worker_threads(monkeypatch):
    """PR_SET_PDEATHSIG fires when the forking *thread* exits; trio's worker
    threads exit after 10 idle seconds (``IDLE_TIMEOUT``, read by each idle
    worker at every wait: shortened here to 0.5 s, so the test waits 2 s
    instead of 11.5). Forked from the main thread, the child must still be
    alive well after a worker retired."""
    from trio._core import _thread_cache

    monkeypatch.setattr(_thread_cache, "IDLE_TIMEOUT", 0.5)
    child = Child.spawn([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # Let a trio worker thread start and retire meanwhile.
        await trio.to_thread.run_sync(time.sleep, 0.01)
        await trio.sleep(2.0)
        assert child.returncode is None
    finally:
        child.kill()
        assert await child.wait() == -signal.SIGKILL
        child.close()


async def test_many_tasks_can_wait_for_one_exit():
    child = Child.spawn([sys.executable, "-c", "import sys, time; time.sleep(0.3); sys.exit(4)"])
    results = []

    async def waiter():
        results.append(await child.wait())

    async with trio.open_nursery() as n:
        for _ in range(3):
            n.start_soon(waiter)
    assert results == [4, 4, 4]
    child.close()
