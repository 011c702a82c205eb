"""PATCH /config changes runtime keys; a bad value, an unknown key or a
start-up-only key changes nothing and says why."""


def test_patch_changes_the_interval(start_demo):
    d = start_demo({"TrimIntervalSeconds": 30}, study_mb=8)
    r = d.request("PATCH", "/config", json={"TrimIntervalSeconds": 75})
    assert r.status_code == 200, r.text
    assert r.json()["TrimIntervalSeconds"] == 75
    assert d.get("/config").json()["TrimIntervalSeconds"] == 75


def test_bad_values_change_nothing(start_demo):
    d = start_demo({"TrimIntervalSeconds": 30}, study_mb=8)
    before = d.get("/config").json()
    for patch, needle in (({"TrimIntervalSeconds": -1}, "TrimIntervalSeconds"),
                          ({"TrimIntervalSeconds": "fast"}, "TrimIntervalSeconds"),
                          ({"TrimIntervalSeconds": 60, "PressureRatio": 7}, "PressureRatio"),
                          ({"TrimIntervalSecond": 60}, "TrimIntervalSeconds"),
                          ({"HttpPort": 9999}, "HttpPort")):
        r = d.request("PATCH", "/config", json=patch)
        assert r.status_code == 400, (patch, r.text)
        body = r.json()["error"]
        assert body["code"] == "bad_config" and needle in body["message"], (patch, body)
        assert d.get("/config").json() == before, patch
