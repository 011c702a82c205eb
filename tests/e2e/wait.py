"""The end-to-end tests' one way to wait: on a condition, polled, with a
deadline that guards against a hang (never a sleep that hopes the host got
there meanwhile).

    wait_for(predicate, timeout, what)  -> the predicate's first truthy value
    wait_for_stats(demo, predicate, what) -> the first /memory/stats body it accepts

On timeout both raise AssertionError naming `what` and the last value seen
(or the last exception, when `retry_on` let the predicate raise meanwhile).
"""
import time


def wait_for(predicate, timeout=30, what="the condition", interval=0.05, retry_on=()):
    """Poll predicate() every `interval` s until it returns something truthy
    (returned) or `timeout` s have passed. Exceptions of the types in
    `retry_on` count as "not yet"; any other ends the wait at once."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = value
        except retry_on as e:  # noqa: PERF203 - the host may not answer yet
            last = e
        if time.monotonic() >= deadline:
            shown = repr(last)
            raise AssertionError(f"timed out after {timeout} s waiting for {what}"
                                 f" (last: {shown[:1500]})")
        time.sleep(interval)


def wait_for_stats(demo, predicate, what, timeout=30):
    """The first /memory/stats body of `demo` (anything with .get(path)) for
    which predicate(body) holds."""
    seen = []

    def check():
        body = demo.get("/memory/stats").json()
        seen[:] = [body]
        return body if predicate(body) else None
    try:
        return wait_for(check, timeout, what, interval=0.1)
    except AssertionError as e:
        raise AssertionError(f"{e}; last /memory/stats: {seen[0] if seen else None}") from None


def group_trim(api, timeout=60):
    """POST /memory/trim to a worker group's leader: (the reply's body, {pid: result})
    with every member's result. The leader's is in the reply; the others are asked by
    its group thread (`status: requested`) and their results read from the store: the
    newest manual trim of each pid that started at or after the leader's."""
    import requests
    r = requests.post(api + "/memory/trim", timeout=timeout)
    assert r.status_code == 200, r.text
    body = r.json()
    results = {}
    for m in body["group"]["members"]:
        if m.get("status") != "requested":
            results[m["pid"]] = m
            continue

        def stored(pid=m["pid"]):
            rows = requests.get(api + "/memory/trims", params={
                "pid": pid, "trigger": "manual", "since": body["timestamp_ms"], "limit": 1},
                timeout=10).json()["trims"]
            return rows[0] if rows else None
        results[m["pid"]] = wait_for(stored, timeout, f"pid {m['pid']}'s trim in the store")
    return body, results
