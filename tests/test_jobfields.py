"""The job spec's one field table (slurmgpu.jobfields) drives the YAML checker, the flag overrides,
the per-site field list and the CLI flags: nothing may describe a field on its own."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from slurmgpu import vocab
from slurmgpu.cli import main
from slurmgpu.errors import ConfigError
from slurmgpu.job import JobSpec, apply_overrides
from slurmgpu.job import spec as spec_mod
from slurmgpu.jobfields import CONTAINER_FIELDS, FIELDS, PARALLEL_HELP

DERIVED = {"site_override", "source", "locs"}  # set by the loader, not by the user


def test_every_spec_field_is_in_the_table():
    assert [f.key for f in FIELDS] == [n for n in JobSpec.__dataclass_fields__ if n not in DERIVED]
    container = [f.name for f in dataclasses.fields(spec_mod.ContainerSpec) if f.name != "image_at"]
    assert [f.key for f in CONTAINER_FIELDS] == container
    assert tuple(PARALLEL_HELP) == vocab.PARALLEL_KEYS


def test_defaults_agree_with_the_dataclass():
    spec = JobSpec()
    for f in FIELDS:
        if f.default is None or callable(f.default):
            continue
        assert getattr(spec, f.key) == f.default, f.key


def test_every_check_named_exists():
    for f in tuple(FIELDS) + tuple(CONTAINER_FIELDS):
        assert f.check is None or f.check in spec_mod.CHECKS, f.key


def test_gen_flags_are_the_table():
    cmd = main.commands["gen"]
    opts = {o for p in cmd.params for o in getattr(p, "opts", ())}
    for f in tuple(FIELDS) + tuple(CONTAINER_FIELDS):
        if f.flag:
            assert f.flag in opts, f.flag
    for key in vocab.PARALLEL_KEYS:
        assert "--" + key.replace("_", "-") in opts


def test_per_site_fields_come_from_the_table():
    assert set(spec_mod.SITE_FIELDS) == {f.key for f in FIELDS if f.per_site} | {"image"}


@pytest.mark.parametrize("field,value", [("grace", 70000), ("mem", "lots"), ("time", "soon"), ("dependency", "x")])
def test_yaml_and_flag_refuse_the_same_values(field, value, tmp_path):
    """One check per field for both ways in: --grace 70000 used to pass as a flag while the YAML refused it."""
    path = tmp_path / "slurmgpu.yaml"
    path.write_text("%s: %s\n" % (field, value))
    with pytest.raises(ConfigError):
        spec_mod.load_spec(str(path))
    with pytest.raises(ConfigError) as exc:
        apply_overrides(JobSpec(), {field: value})
    flag = next(f.flag for f in FIELDS if f.key == field)
    assert flag in str(exc.value)


def test_a_flag_overrides_the_yaml(tmp_path):
    (tmp_path / "slurmgpu.yaml").write_text("partition: a\ngrace: 100\nrequeue: false\n")
    spec = spec_mod.load_spec(str(tmp_path / "slurmgpu.yaml"))
    got = apply_overrides(spec, {"partition": "b", "grace": 200, "requeue": True})
    assert (got.partition, got.grace, got.requeue) == ("b", 200, True)


def test_the_cli_refuses_a_bad_flag_value_with_its_name():
    r = CliRunner().invoke(main, ["gen", "--grace", "70000", "--", "train.py"])
    assert r.exit_code != 0 and "--grace" in r.output and "65535" in r.output
