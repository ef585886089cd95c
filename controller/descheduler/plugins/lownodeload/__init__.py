"""The ``LowNodeLoad`` Balance plugin (controller-spec §6.4): args and node pools
(:mod:`.args`), usage from NodeMetrics (:mod:`.usage`), thresholds and node classes
(:mod:`.thresholds`), anomaly detection (:mod:`.anomaly`) and the plugin (:mod:`.plugin`)."""

from controller.descheduler.plugins.lownodeload.args import LowNodeLoadArgs, load_args
from controller.descheduler.plugins.lownodeload.plugin import NAME, LowNodeLoad

__all__ = ["NAME", "LowNodeLoad", "LowNodeLoadArgs", "load_args"]
