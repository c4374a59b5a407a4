"""The cold start at preview (gke_ray_tpu.preflight.cold_start, for the stack by gke_ray_tpu.stack.checks): what each
TPU host pulls and installs before the first step, with and without the stack's image, beside what the chips cost
meanwhile."""

from __future__ import annotations

import re
import tomllib

from gke_ray_tpu.core import worker_env
from gke_ray_tpu.preflight import cold_start
from gke_ray_tpu.stack import preview
from gke_ray_tpu.stack.checks import check_cold_start
from gke_ray_tpu.stack.parse import parse_stack_config
from tests.conftest import with_keys

LINE = re.compile(r"  ([* ]) (.+?): pulls ~([\d.]+) GB \(~(\d+) s\), (.+): ~(\d+) s(?:, \$([\d,.]+) of idle chips)?$")


def lines(config: dict) -> dict[str, tuple]:
    said: list[str] = []
    check_cold_start(parse_stack_config(config), info=said.append)
    (text,) = said
    found = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            chosen, label, pulled, pull_s, install, total_s, usd = match.groups()
            found[label.split(" ")[0]] = (chosen == "*", float(pulled), int(pull_s), install, int(total_s),
                                          None if usd is None else float(usd.replace(",", "")))
    assert set(found) == {"with", "without"}, text
    return found


def test_the_preview_says_what_each_host_pulls_and_installs_and_marks_the_stacks_choice(dev_config, capsys):
    with_image, without = lines(dev_config)["with"], lines(dev_config)["without"]
    assert with_image[0] and not without[0]
    assert with_image[3] == "installs nothing"
    wheels = sum(_platform_wheel(p)["size"] for p in tomllib.loads(worker_env.LOCK_FILE.read_text())["packages"])
    assert f"then installs up to {wheels / 1e9:.2f} GB of wheels from PyPI" in without[3]
    assert with_image[1] == round(without[1] + wheels / 1e9, 2)  # the lock is in the image's bytes instead
    assert lines(with_keys(dev_config, buildImage="false"))["without"][0]
    assert preview.main(["--stack", "dev", "--section", "training"]) == 0
    assert "Cold start of each TPU host before the first step (8 hosts, 32 chips;" in capsys.readouterr().out


def _platform_wheel(package: dict) -> dict:
    return next((w for w in package["wheels"] if not w["url"].endswith("-any.whl")), package["wheels"][0])


def test_the_chips_wait_at_the_stacks_price_and_an_unpriced_region_gets_bytes_only(dev_config):
    on_demand = lines(dev_config)["without"]
    # 32 v6e chips on demand in us-east5 at $2.70/chip-hour (core.prices), for the line's own seconds.
    assert abs(on_demand[5] - 32 * 2.70 * on_demand[4] / 3600) <= 0.01 + 32 * 2.70 / 3600
    spot = lines(with_keys(dev_config, capacity="spot"))["without"]
    assert spot[5] < on_demand[5]
    unpriced = lines(with_keys(dev_config, **{"gcp:region": "us-west4", "gcp:zone": "us-west4-a"}))
    assert unpriced["without"][5] is None and unpriced["without"][1] == on_demand[1]


def test_the_assumptions_are_named_with_their_sources():
    text = cold_start.format_cold_start(cold_start.host_starts(1e9, 10), True, 4, 16, None, "test")
    assert "ai-on-gke startup-latency.md" in text and "ray-project/ray#52375" in text and "bench/bench_lock_install.py" in text
