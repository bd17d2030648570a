"""The plugin layer: hook specifications and discovery."""

from fusegrad.plugin.hookspecs import BACKEND_API_VERSION, hookimpl, hookspec

__all__ = ["BACKEND_API_VERSION", "hookimpl", "hookspec"]
