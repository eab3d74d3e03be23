"""What ``agentenv serve --ray`` checks and sets before Ray starts: the Ray range, Serve's settings, the flags."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest
from agentenv.errors import AgentEnvError
from agentenv_server.ray import HEADROOM, INSTALL, check_ray, deployment_options, supported

from tests.support import FAKE, ROOT
from tools.matrix import MATRIX


def test_the_ray_range_is_the_extras_and_an_installed_ray_fits_it():
    pyproject = tomllib.loads((ROOT / "packages" / "agentenv-server" / "pyproject.toml").read_text())
    (declared,) = pyproject["project"]["optional-dependencies"]["ray"]
    from packaging.requirements import Requirement

    assert Requirement(supported()).specifier == Requirement(declared).specifier
    assert Requirement(supported()).name == "ray"
    import ray

    assert check_ray() == ray.__version__


@pytest.mark.parametrize("side", ["below", "above"])
def test_a_ray_out_of_range_is_refused_naming_both_versions_and_the_fix(side: str):
    from packaging.version import Version

    floor = Version(MATRIX["ray"].versions[0])  # the lowest release in the range, and the newest it holds
    top = Version(MATRIX["ray"].versions[-1])
    outside = f"{floor.major}.{floor.minor - 1}.0" if side == "below" else f"{top.major}.{top.minor + 1}.0"
    with pytest.raises(ImportError) as refused:
        check_ray(outside)
    message = str(refused.value)
    assert f"ray {outside} is installed" in message
    assert supported() in message and INSTALL in message


def test_serve_never_routes_past_a_replicas_sessions_and_routes_to_the_least_busy():
    from agentenv_server._replica import LeastBusyRouter

    options = deployment_options(16, replicas=3, drain_seconds=12)
    assert options["num_replicas"] == 3
    assert options["max_ongoing_requests"] == 16 + HEADROOM
    assert options["request_router_config"].request_router_class == f"{LeastBusyRouter.__module__}.LeastBusyRouter"
    assert options["graceful_shutdown_timeout_s"] == 12
    assert options["ray_actor_options"] == {"num_cpus": 1.0}


def test_autoscaling_aims_at_most_of_a_replicas_sessions():
    scaling = deployment_options(10, autoscale=(1, 4))["autoscaling_config"]
    assert (scaling["min_replicas"], scaling["max_replicas"]) == (1, 4)
    assert scaling["target_ongoing_requests"] == 8.0
    with pytest.raises(AgentEnvError, match="MIN <= MAX"):
        deployment_options(10, autoscale=(3, 2))
    with pytest.raises(AgentEnvError, match="--replicas 0"):
        deployment_options(10, replicas=0)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--replicas", "2"], "--replicas only apply with --ray"),
        (["--ray-address", "auto"], "--ray-address only apply with --ray"),
        (["--ray", "--autoscale", "3"], "--autoscale 3: give MIN:MAX"),
    ],
)
def test_ray_flags_are_checked_before_ray_starts(args, says):
    done = subprocess.run([sys.executable, "-m", "agentenv.cli", "serve", str(FAKE), *args],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert says in done.stderr


def test_serves_application_builder_binds_the_tokens_variable_never_the_token_and_checks_its_args(monkeypatch):
    from agentenv_server.ray import build_application

    monkeypatch.setenv("RAYSERVICE_TOKEN", "tok-k8s")
    app = build_application({"bundle": str(FAKE), "token_var": "RAYSERVICE_TOKEN", "autoscale": "1:3",
                             "max_concurrent_envs": 8})  # fmt: skip
    deployment = app._bound_deployment  # what Serve deploys: the one deployment, its settings and arguments
    assert deployment.max_ongoing_requests == 8 + HEADROOM
    bundle, options, token_var, _ = deployment.init_args
    assert (bundle, options["max_concurrent_envs"], token_var) == (str(FAKE), 8, "RAYSERVICE_TOKEN")
    assert "tok-k8s" not in repr(deployment.init_args)  # Serve keeps bound arguments in Ray's GCS
    with pytest.raises(AgentEnvError, match="unknown replica; give bundle"):
        build_application({"bundle": str(FAKE), "replica": 2})


def test_deploy_refuses_a_public_host_without_a_token():
    from agentenv_server.ray import deploy

    with pytest.raises(AgentEnvError, match="allow_no_token=True"):
        deploy(FAKE, host="0.0.0.0")
