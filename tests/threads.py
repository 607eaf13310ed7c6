"""Running a test's callables side by side in threads."""

import threading


def side_by_side(*targets, timeout=60):
    """Call each of ``targets`` in a thread of its own, all started at once, and wait up to ``timeout`` seconds for
    each; True when every one of them ended."""
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    return not any(thread.is_alive() for thread in threads)
