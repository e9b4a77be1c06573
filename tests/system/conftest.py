"""The system tests reuse the controller tests' offline AWS world (tests/controller): imported, not
copied. `shared_world` builds moto EC2/SSM/S3/Step Functions once per module; `world` resets it."""

from tests.controller.conftest import shared_world, world  # noqa: F401
