"""``agentenv image build`` and ``agentenv image base``: images made on this machine, nothing pulled."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentenv_docker.images import base_key

from tests.support.containers import BASE, BOX, agentenv, docker


@pytest.fixture
def tagged(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A copy of the box bundle whose env's image has a name of its own (removed after the test)."""
    image = f"agentenv-test/box-built:{uuid.uuid4().hex[:8]}"
    bundle = shutil.copytree(BOX, tmp_path / "box")
    text = (bundle / "bundle.yaml").read_text()
    (bundle / "bundle.yaml").write_text(text.replace("image: agentenv-test/box:1", f"image: {image}"))
    yield bundle, image
    docker("rmi", "-f", image, check=False)


def test_image_build_makes_each_container_envs_image_from_its_dockerfile(images: str, tagged) -> None:
    bundle, image = tagged
    # a RUN step that sees the build's network: only loopback (docker build --network none)
    with (bundle / "image" / "Dockerfile").open("a") as f:
        f.write('RUN python3 -c "import socket; print(sorted(n for _, n in socket.if_nameindex()))" > /env/nets\n')
    done = agentenv("image", "build", str(bundle), "--base", BASE)
    assert done.returncode == 0, done.stderr
    assert f"built 1 image(s): {image}" in done.stdout
    assert docker("image", "inspect", "--format", '{{index .Config.Labels "agentenv.bundle"}}', image).strip() == "box"
    assert docker("run", "--rm", "--network", "none", image, "cat", "/env/nets").strip() == "['lo']"


def test_image_build_on_a_base_the_engine_lacks_names_the_command_that_makes_it(images: str, tagged) -> None:
    bundle, _ = tagged
    done = agentenv("image", "build", str(bundle), "--base", "agentenv-test/no-such-base:1")
    assert done.returncode == 2
    assert "the base image 'agentenv-test/no-such-base:1' is not on the engine" in done.stderr
    assert "agentenv image base agentenv-test/no-such-base:1" in done.stderr


def test_image_build_of_an_env_the_bundle_lacks_names_its_container_envs(images: str) -> None:
    done = agentenv("image", "build", str(BOX), "--env", "boxx")
    assert done.returncode == 2
    assert "no container env 'boxx'; its container envs: box" in done.stderr


def test_image_base_finds_the_base_it_made_by_its_recipes_key(images: str) -> None:
    done = agentenv("image", "base", BASE)
    assert done.returncode == 0, done.stderr
    assert f"{BASE}: on the engine already (recipe {base_key('bookworm', ['python3'])})" in done.stdout
