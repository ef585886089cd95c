"""The descheduler's plugins, one module each, and :data:`PLUGINS`, the table that names them.

Each entry gives the plugin's ``Args`` Struct (``<Plugin>Args``: defaults, validation), its
factory (``factory(args)`` -> the plugin, kept across cycles) and the extension points it
implements. :mod:`controller.descheduler.config` builds every enabled plugin's args through this
table; the ``descheduler`` loop builds the plugins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from controller.descheduler.config import BALANCE, EVICT, FILTER, PluginEntry
from controller.descheduler.evictor import MigrationController, MigrationControllerArgs
from controller.descheduler.plugins.custompriority import CustomPriority, CustomPriorityArgs
from controller.descheduler.plugins.lownodeload import LowNodeLoad, LowNodeLoadArgs

__all__ = ["PLUGINS", "PluginEntry"]

#: Every plugin koordpy's descheduler has, by name.
PLUGINS: Final[Mapping[str, PluginEntry]] = {
    "CustomPriority": PluginEntry(
        args=CustomPriorityArgs, factory=CustomPriority, points=frozenset({BALANCE})
    ),
    "LowNodeLoad": PluginEntry(
        args=LowNodeLoadArgs, factory=LowNodeLoad, points=frozenset({BALANCE})
    ),
    "MigrationController": PluginEntry(
        args=MigrationControllerArgs,
        factory=MigrationController,
        points=frozenset({EVICT, FILTER}),
    ),
}
