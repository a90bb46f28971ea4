"""The engine's ports are met by the parts the runtime plugs in, member for member with the
same parameters: the Door the web and the metrics read (``LoopPort``), the Kubernetes
writer (``ClusterWriter``) and the metrics recorder (``LoopMetrics``). A port that grows a
member its part lacks, or a renamed parameter, fails here before a keyword call fails at
run time."""

from __future__ import annotations

import inspect

import pytest

from director.adapters.kube.write import KubeWriter
from director.adapters.metrics.collector import Recorder
from director.engine import ports
from director.engine.door import Door


def members(protocol: type) -> dict[str, object]:
    return {
        name: value
        for name, value in vars(protocol).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


@pytest.mark.parametrize(
    ("port", "part"),
    [(ports.LoopPort, Door), (ports.ClusterWriter, KubeWriter), (ports.LoopMetrics, Recorder)],
)
def test_each_port_is_met_member_for_member(port: type, part: type) -> None:
    wanted = members(port)
    assert wanted, f"{port.__name__} declares nothing"
    for name, declared in wanted.items():
        given = getattr(part, name, None)
        assert given is not None, f"{part.__name__} has no {name} ({port.__name__} needs it)"
        if isinstance(declared, property):
            assert isinstance(given, property), f"{part.__name__}.{name} is not a property"
            continue
        want = list(inspect.signature(declared).parameters.values())  # type: ignore[arg-type]
        have = list(inspect.signature(given).parameters.values())
        assert [(p.name, p.kind) for p in have[: len(want)]] == [(p.name, p.kind) for p in want], (
            f"{part.__name__}.{name}{inspect.signature(given)} is not {port.__name__}'s"
        )
        extra = have[len(want) :]
        assert all(p.default is not p.empty for p in extra), f"{name}: a required extra"
