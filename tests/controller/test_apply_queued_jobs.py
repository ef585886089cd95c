"""Applying a queued job's manifest again leaves what the queue did to the job in place."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from apis import codec
from apis import constants as k
from apis.core import Job, PyTorchJob
from apis.meta import Object
from controller.api.apply import apply as kubectl_apply
from controller.queueing.jobs import EXTENSIONS
from controller.store.cluster import Outcome
from controller.store.sqlite import Store

EXAMPLES = Path(__file__).parents[2] / "examples"
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def _manifest(name: str) -> Object:
    [obj] = codec.decode_documents((EXAMPLES / name).read_text("utf-8"), source=name)
    return obj


@pytest.mark.parametrize(
    ("example", "extension"),
    [("batch-job.yaml", "job"), ("pytorchjob.yaml", "pytorchjob")],
)
def test_reapplying_a_released_job_keeps_it_released(example: str, extension: str) -> None:
    adapter = EXTENSIONS[extension]
    with Store() as store:
        stored, _ = kubectl_apply(store, _manifest(example))
        queued = store.update(adapter.enqueued(stored, "team-a/unit", NOW))
        released = store.update(adapter.resume(queued, NOW))
        assert not adapter.is_suspended(released)

        again, outcome = kubectl_apply(store, _manifest(example))
        assert outcome is Outcome.UNCHANGED
        assert again == released
        assert not adapter.is_suspended(again)


def test_reapplying_a_queued_job_keeps_the_template_stamps() -> None:
    adapter = EXTENSIONS["pytorchjob"]
    with Store() as store:
        stored, _ = kubectl_apply(store, _manifest("pytorchjob.yaml"))
        queued = store.update(adapter.enqueued(stored, "team-a/resnet50-ddp-py-qu", NOW))
        assert isinstance(queued, PyTorchJob)
        worker = queued.spec.pytorch_replica_specs["Worker"].template.metadata
        assert worker.annotations[k.ANNOTATION_RELATED_QUEUEUNIT] == "team-a/resnet50-ddp-py-qu"
        assert worker.labels[k.LABEL_SCHEDULE_ADMISSION] == "false"

        again, outcome = kubectl_apply(store, _manifest("pytorchjob.yaml"))
        assert outcome is Outcome.UNCHANGED
        assert again == queued


def test_a_changed_manifest_still_applies_over_a_released_job() -> None:
    adapter = EXTENSIONS["job"]
    with Store() as store:
        stored, _ = kubectl_apply(store, _manifest("batch-job.yaml"))
        store.update(adapter.resume(store.update(adapter.enqueued(stored, "u", NOW)), NOW))
        manifest = _manifest("batch-job.yaml")
        assert isinstance(manifest, Job)
        bigger = msgspec.structs.replace(manifest.spec, parallelism=8)
        changed, outcome = kubectl_apply(store, msgspec.structs.replace(manifest, spec=bigger))
        assert outcome is Outcome.CONFIGURED
        assert isinstance(changed, Job)
        assert changed.spec.parallelism == 8
        assert changed.spec.suspend is False
