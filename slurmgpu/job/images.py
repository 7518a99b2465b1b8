"""Container image references: one parse, written in each runtime's spelling.

A job spec names its image once, but the sites it travels to run containers
with runtimes that spell the same registry image differently:

  pyxis/enroot   nvcr.io#nvidia/pytorch:24.04-py3        registry '#' path; or a squashfs file (.sqsh)
  Apptainer      docker://nvcr.io/nvidia/pytorch:24.04-py3  or a .sif file (or a sandbox directory)
  Docker style   nvcr.io/nvidia/pytorch:24.04-py3        accepted as input and written as one of the above

`parse_image` reads any of these into an `ImageRef` (registry, path, tag or
digest; or a local file and its format); `spell` writes it for one runtime or
raises `ImageError` naming both the image and what that runtime or GPU needs.
Nothing here reads the file system: a path is judged by its name.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

from ..errors import SlurmgpuError

SIF_SUFFIXES = (".sif", ".simg")  # Apptainer / Singularity image files
SQUASHFS_SUFFIXES = (".sqsh", ".squashfs", ".sqfs")  # enroot's image files
APPTAINER_SCHEMES = ("library://", "oras://", "shub://")  # Apptainer-only sources
DOCKER_HUB = ("docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com")
_DIGEST = re.compile(r"@(sha256|sha512):[0-9A-Fa-f]{32,}$")
_CUDA = re.compile(r"cuda|(?<![a-z0-9])cu1[0-9]{2}(?![0-9])")


class ImageError(SlurmgpuError):
    """An image the site's runtime (or its GPUs) cannot use."""


@dataclass(frozen=True)
class ImageRef:
    source: str  # as written
    kind: str  # registry | file | uri (an Apptainer-only scheme)
    registry: Optional[str] = None  # None: Docker Hub, as written without a registry
    path: str = ""  # nvidia/pytorch
    tag: Optional[str] = None
    digest: Optional[str] = None  # sha256:...
    user: Optional[str] = None  # enroot's USER@ (credentials come from enroot's config)
    file_format: Optional[str] = None  # sif | squashfs | None (a directory or unknown)

    @property
    def docker_hub(self) -> bool:
        return self.registry is None or self.registry.lower() in DOCKER_HUB

    def name(self) -> str:
        """What the GPU-stack guess reads: the image's path and tag, or a file's name."""
        if self.kind == "file":
            return os.path.basename(self.source.rstrip("/"))
        if self.kind == "uri":
            return self.source
        return "%s:%s" % (self.path, self.tag or "")

    def gpu_stack(self) -> Optional[str]:
        """'cuda' or 'rocm' when the name says which GPU stack the image was built for, else None."""
        text = self.name().lower()
        cuda = bool(_CUDA.search(text)) or (
            self.kind == "registry" and (self.registry or "").lower() == "nvcr.io" and self.path.startswith("nvidia/")
        )
        rocm = "rocm" in text
        if cuda == rocm:  # neither, or both (a name that mentions both decides nothing)
            return None
        return "cuda" if cuda else "rocm"


def _looks_like_file(s: str) -> bool:
    return s.startswith(("/", "./", "../", "~", "$")) or s.lower().endswith(SIF_SUFFIXES + SQUASHFS_SUFFIXES)


def parse_image(text: str) -> ImageRef:
    """Read an image reference in pyxis, Apptainer or Docker spelling."""
    s = text
    if not s or not s.strip():
        raise ImageError("an image reference cannot be empty")
    if s.lower().startswith(APPTAINER_SCHEMES):
        return ImageRef(source=s, kind="uri")
    explicit = s.lower().startswith("docker://")
    if not explicit and "#" not in s and _looks_like_file(s):
        low = s.lower()
        fmt = "sif" if low.endswith(SIF_SUFFIXES) else "squashfs" if low.endswith(SQUASHFS_SUFFIXES) else None
        return ImageRef(source=s, kind="file", file_format=fmt)
    body = s[len("docker://") :] if explicit else s
    digest = None
    m = _DIGEST.search(body)
    if m:
        digest, body = m.group(0)[1:], body[: m.start()]
    registry = user = None
    if "#" in body:  # enroot: [USER@][REGISTRY#]IMAGE[:TAG]
        head, body = body.split("#", 1)
        if "@" in head:
            user, head = head.rsplit("@", 1)
        registry = head or None
    else:  # Docker: the first component is a registry when it has a '.' or ':' or is localhost
        first, sep, rest = body.partition("/")
        if sep and ("." in first or ":" in first or first == "localhost"):
            registry, body = first, rest
    last = body.rsplit("/", 1)[-1]
    tag = None
    if ":" in last:
        body, tag = body.rsplit(":", 1)
    if not body or body.startswith("/") or (tag is not None and not tag):
        raise ImageError(
            "cannot read the image reference %r: expected [REGISTRY/]NAME[:TAG], e.g. "
            "nvcr.io/nvidia/pytorch:24.04-py3" % text
        )
    return ImageRef(source=s, kind="registry", registry=registry, path=body, tag=tag, digest=digest, user=user)


def _suffix(ref: ImageRef) -> str:
    return (":" + ref.tag if ref.tag else "") + ("@" + ref.digest if ref.digest else "")


def pyxis_spelling(ref: ImageRef) -> str:
    """pyxis --container-image: [USER@][REGISTRY#]IMAGE[:TAG], or a squashfs file."""
    return (
        ((ref.user + "@") if ref.user else "")
        + ("" if ref.docker_hub or ref.registry is None else ref.registry + "#")
        + ref.path
        + _suffix(ref)
    )


def apptainer_spelling(ref: ImageRef) -> str:
    """apptainer exec: docker://[REGISTRY/]IMAGE[:TAG]."""
    return "docker://" + ("" if ref.registry is None else ref.registry + "/") + ref.path + _suffix(ref)


def spell(image: str, runtime: str, site: str, vendor: Optional[str] = None, gpu: str = "") -> str:
    """`image` as `runtime` takes it on `site` (whose GPUs are from `vendor`); ImageError if it cannot run there."""
    ref = parse_image(image)
    if vendor in ("nvidia", "amd"):
        stack = ref.gpu_stack()
        need = "cuda" if vendor == "nvidia" else "rocm"
        if stack is not None and stack != need:
            raise ImageError(
                "image %s is a %s build, but site %s has %s GPUs, which need a %s build; give this site its own "
                "image (sites: {%s: {image: ...}} in slurmgpu.yaml, or --image)"
                % (
                    image,
                    "CUDA (NVIDIA)" if stack == "cuda" else "ROCm (AMD)",
                    site,
                    " ".join(w for w in ("NVIDIA" if vendor == "nvidia" else "AMD", gpu) if w),
                    "CUDA" if need == "cuda" else "ROCm",
                    site,
                )
            )
    if runtime == "pyxis":
        if ref.kind == "file":
            if ref.file_format == "sif":
                raise ImageError(
                    "image %s is a SIF file (Apptainer's format), but site %s runs pyxis/enroot, which takes a "
                    "squashfs file (.sqsh, from `enroot import docker://...`) or a registry image such as "
                    "nvcr.io#nvidia/pytorch:24.04-py3" % (image, site)
                )
            return ref.source
        if ref.kind == "uri":
            raise ImageError(
                "image %s uses an Apptainer-only source (%s), but site %s runs pyxis/enroot, which takes a registry "
                "image such as nvcr.io#nvidia/pytorch:24.04-py3 or a squashfs file (.sqsh)"
                % (image, ref.source.split("://", 1)[0] + "://", site)
            )
        return pyxis_spelling(ref)
    if runtime == "apptainer":
        if ref.kind == "file":
            if ref.file_format == "squashfs":
                raise ImageError(
                    "image %s is a squashfs file (enroot's format), but site %s runs Apptainer, which takes a .sif "
                    "file (`apptainer build image.sif docker://...`) or a registry image such as "
                    "docker://nvcr.io/nvidia/pytorch:24.04-py3" % (image, site)
                )
            return ref.source
        if ref.kind == "uri":
            return ref.source
        if ref.user:
            raise ImageError(
                "image %s names a registry user (%s@, enroot's syntax), but site %s runs Apptainer, which reads "
                "registry credentials from `apptainer registry login` or APPTAINER_DOCKER_USERNAME/PASSWORD; "
                "drop the user from the image" % (image, ref.user, site)
            )
        return apptainer_spelling(ref)
    raise ImageError(
        "site %s: unknown container runtime %r for image %s (expected pyxis or apptainer)" % (site, runtime, image)
    )
