"""Every independent problem of a job spec on a site, found in one run.

The spec's own checks (types, names, values) run when it is loaded; what needs the site, the
model catalogue or the launcher used to surface one stage at a time (the partition when the
node type is looked up, the model when it is sized, the program and training inputs when the
launcher's arguments are written), so a spec with four mistakes took four runs. These checks
run before planning and report together, each at the place the value was set: the spec's
file:line:col, its sites.<name> block, or the flag.

Missing training inputs alone do not stop a job here: generation then says first whether the
site's filter would refuse the layout anyway (no inputs would make that job run), as before.
With any other problem they are reported with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, List, Tuple

from ..errors import ConfigError, Issue, SlurmgpuError

if TYPE_CHECKING:
    from ..site import Site
    from .spec import JobSpec


@dataclass(frozen=True)
class SpecProblems:
    """`stop`: problems nothing later can outrank; `inputs`: training inputs the launcher lacks
    (and clashes in the user's arguments found with them)."""

    stop: Tuple[Issue, ...] = ()
    inputs: Tuple[Issue, ...] = ()

    def all(self) -> List[Issue]:
        return list(self.stop) + list(self.inputs)


def spec_issues(site: Site, spec: JobSpec, launch: bool = True) -> SpecProblems:
    """The problems planning and rendering would stop at one by one (`launch`: also what the
    launcher needs to start: a program, weights, training inputs)."""
    stop: List[Issue] = []

    def add(key: str, message: str) -> None:
        f, line, col = spec.where(key)
        stop.append(Issue(f, line, col, key, message))

    if spec.partition and spec.partition not in site.partitions:
        add(
            "partition",
            "site %s has no partition %r (it has: %s)" % (site.name, spec.partition, ", ".join(site.partitions)),
        )
    if spec.model:
        from .sizing import _model

        try:
            _model(spec.model)
        except ConfigError as exc:
            for i in exc.issues:
                add("model", i.message if i.file in ("", "--model") else str(i))
    if not launch:
        return SpecProblems(tuple(stop))
    program, inputs = _launch_issues(spec)
    return SpecProblems(tuple(stop + program), tuple(inputs))


def _launch_issues(spec: JobSpec) -> Tuple[List[Issue], List[Issue]]:
    """What the launcher cannot start without, from its own checks (not re-stated here):
    (program and weights, training inputs)."""
    from ..plan import Layout
    from . import launchers as L

    launcher = L.get_launcher(spec.launcher)
    where = "%s (or the arguments after --)" % spec.source if spec.source else "arguments after --"

    def located(exc: ConfigError, fields: Tuple[str, ...]) -> List[Issue]:
        out = []
        for i in exc.issues:
            if i.path in fields:
                key = i.path if i.path != "data" else _first_missing(spec, launcher.needs_inputs)
                f, line, col = spec.locs.get(key) or (i.file or spec.source or "", None, None)
                out.append(Issue(f, line, col, i.path, i.message))
        return out

    program: List[Issue] = []
    try:
        L.program(launcher, spec.command, spec.args, where)
    except ConfigError as exc:
        program += located(exc, ("command",))
    if not spec.command or spec.command[0].startswith("-"):
        try:
            L.weights_args(launcher, spec.weights)
        except ConfigError as exc:
            program += located(exc, ("weights",))
    inputs: List[Issue] = []
    if launcher.needs_inputs and not spec.smoke:
        # the launcher's own check of its training inputs, on a stand-in layout; a training length
        # that --tokens gives (through the plan's global batch) counts as given
        opts = L.Options(
            data=spec.data,
            tokenizer=spec.tokenizer,
            train_iters=spec.train_iters or (1 if spec.tokens else None),
            lr=spec.lr,
            seq=spec.seq,
        )
        user_argv = tuple(spec.command) + tuple(spec.args)
        layout = Layout(nodes=1, gpus_per_node=1)
        try:
            L.framework_args(launcher, layout, opts, user_argv)
        except ConfigError as exc:
            inputs += located(exc, tuple(launcher.needs_inputs))
            # as launch_argv does: a clash in the user's arguments is named in the same error
            try:
                smoke = L.framework_args(launcher, layout, replace(opts, smoke=True), user_argv)
                L.check_conflicts(launcher, user_argv, smoke, where)
            except ConfigError as clash:
                inputs += clash.issues
            except SlurmgpuError:
                pass
        except SlurmgpuError:
            pass  # anything else is the planned layout's business, checked when it is written
    return program, inputs


def _first_missing(spec: JobSpec, fields: Tuple[str, ...]) -> str:
    return next((f for f in fields if getattr(spec, f, None) is None), fields[0] if fields else "")


def check_spec(site: Site, spec: JobSpec, launch: bool = True) -> None:
    """Raise one ConfigError with every problem spec_issues finds (training inputs alone wait for
    the filter's verdict on the layout, see the module's docstring)."""
    found = spec_issues(site, spec, launch)
    if found.stop:
        raise ConfigError(found.all())
