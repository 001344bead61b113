"""The container registry a Linode stack names (linode.imageRegistry; Linode has no registry service of its
own): `pulumi up` pushes the images it builds (gpu_platform/components/images.py) to
<server>/<repository>/<image>, and the cluster pulls them by digest with the credentials of an image pull
Secret (kubernetes.io/dockerconfigjson): the read-only pull user when the stack gives one
(linode.imageRegistry.pullUsername, linode-registry:pullPassword), else the pushing one.

What the registry keeps (retention, immutability, scanning) is the registry's own setting: the program
creates nothing there but the images.
"""

from __future__ import annotations

from typing import Optional

import pulumi

from gpu_platform.components.images import ImageSource, RegistryLogin, build, dockerconfigjson
from gpu_platform.config.linode import LinodeImageRegistry


class NamedRegistry(pulumi.ComponentResource):
    """The stack's named registry: `image` builds an image into it; `pull_config` is what pods pull with."""

    def __init__(self, name: str, config: LinodeImageRegistry, password: pulumi.Input[str],
                 pull_password: Optional[pulumi.Input[str]] = None, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-platform:linode:ImageRegistry", name, None, opts)
        self._name, self.config = name, config
        self.login = RegistryLogin(address=config.server, username=config.username,
                                   password=pulumi.Output.secret(password))
        user, secret = ((config.pull_username, pull_password) if config.pull_username and pull_password is not None
                        else (config.username, password))
        self.pull_config: pulumi.Output[str] = pulumi.Output.secret(pulumi.Output.from_input(secret).apply(
            lambda p: dockerconfigjson(config.server, user, p)))
        self.register_outputs({"server": config.server, "repository": config.repository})

    def image(self, source: ImageSource) -> pulumi.Output[str]:
        """<server>/<repository>/<name>@sha256:..."""
        return build(f"{self._name}-{source.name}", source, self.config.address(source.name), self.login, parent=self)
