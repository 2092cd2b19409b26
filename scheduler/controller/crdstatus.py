"""The status schemas of the TrainingJob and Queue CRDs (what the controller writes)."""

from __future__ import annotations

from typing import Any

MESSAGE_MAX = 32768  # metav1.Condition's message limit

# metav1.Condition, field for field (what `kubectl wait --for=condition=...` and
# controller tooling expect): all but observedGeneration required.
_CONDITION = {
    "type": "object",
    "required": ["type", "status", "reason", "message", "lastTransitionTime"],
    "properties": {
        "type": {
            "type": "string",
            "maxLength": 316,
            "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        },
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "reason": {
            "type": "string",
            "minLength": 1,
            "maxLength": 1024,
            "pattern": r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        },
        "message": {"type": "string", "maxLength": MESSAGE_MAX},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
    },
}
_CONDITIONS = {
    "type": "array",
    "items": _CONDITION,
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}

TRAININGJOB_STATUS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "jobId": {"type": "string", "description": "The job's id in Shoal's store"},
        "phase": {
            "type": "string",
            "enum": [
                "Pending",
                "Scheduled",
                "Running",
                "Succeeded",
                "Failed",
                "Preempted",
                "Cancelled",
                "Invalid",
            ],
        },
        "reason": {"type": "string", "description": "Why the job is pending, in words"},
        "queue": {"type": "string"},
        "workers": {"type": "integer", "description": "workers it has now"},
        "resizes": {
            "type": "array",
            "description": "an elastic job's last changes of size, oldest first",
            "items": {
                "type": "object",
                "properties": {
                    "at": {"type": "string", "format": "date-time"},
                    "attempt": {"type": "integer"},
                    "from": {"type": "integer"},
                    "to": {"type": "integer"},
                    "message": {"type": "string"},
                },
            },
        },
        "gpus": {"type": "string", "description": "GPUs held in all, e.g. '2' or '0.5'"},
        "attempt": {"type": "integer"},
        "restarts": {"type": "integer"},
        "observedGeneration": {"type": "integer"},
        "submittedAt": {"type": "string", "format": "date-time"},
        "startedAt": {"type": "string", "format": "date-time"},
        "finishedAt": {"type": "string", "format": "date-time"},
        "placements": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "worker": {"type": "integer"},
                    "node": {"type": "string"},
                    "gpus": {"type": "array", "items": {"type": "integer"}},
                    "fraction": {"type": "number"},
                    "enforcement": {"type": "string"},
                },
            },
        },
        "conditions": _CONDITIONS,
    },
}

QUEUE_STATUS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "allocated": {"type": "number", "description": "GPUs its jobs hold now"},
        "pending": {"type": "integer", "description": "Jobs waiting"},
        "running": {"type": "integer"},
        "fairShare": {"type": "number", "description": "GPUs its fair share comes to now"},
        "observedGeneration": {"type": "integer"},
        "conditions": _CONDITIONS,
    },
}
