"""Launchers: the port (``base``) and its adapters (``ecs``: RunTask, ``local``: processes)."""

from dispatcher.launcher.base import Launcher, LaunchRequest, LaunchResult

__all__ = ["LaunchRequest", "LaunchResult", "Launcher"]
