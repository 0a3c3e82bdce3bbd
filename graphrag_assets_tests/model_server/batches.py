"""The test server's Batch API (/v1/files, /v1/batches): uploads, batches that take `batch_seconds` to finish, their
output and error files, and the faults of BatchFaults (failed lines, expired, rejected and lost batches)."""

from __future__ import annotations

import json
import time

from .faults import _picked, request_key


class BatchAPI:
    """The Batch API's side of FakeOpenAIServer: its state (files, batches, uploads, batch_checks) is the server's."""

    def upload(self, content: bytes, purpose: str) -> dict:
        with self._lock:
            file_id = f"file-{len(self.files) + 1:06d}"
            self.files[file_id] = content
            self.uploads += purpose == "batch"
        return {
            "id": file_id,
            "object": "file",
            "bytes": len(content),
            "created_at": int(time.time()),
            "filename": "requests.jsonl",
            "purpose": purpose,
            "status": "processed",
        }

    def create_batch(self, request: dict) -> tuple[int, dict]:
        if request.get("input_file_id") not in self.files:
            return 400, {"error": {"message": f"no file {request.get('input_file_id')}"}}
        with self._lock:
            number = len(self.batches) + 1
            batch = {
                "id": f"batch_{number:06d}",
                "object": "batch",
                "endpoint": request["endpoint"],
                "input_file_id": request["input_file_id"],
                "completion_window": request.get("completion_window", "24h"),
                "status": "in_progress",
                "created_at": int(time.time()),
                "metadata": request.get("metadata"),
                "output_file_id": None,
                "error_file_id": None,
                "errors": None,
                "request_counts": {
                    "total": len(self.files[request["input_file_id"]].splitlines()),
                    "completed": 0,
                    "failed": 0,
                },
                "_number": number,
                "_created": time.monotonic(),
            }
            self.batches[batch["id"]] = batch
        return 200, self._public(batch)

    def retrieve_batch(self, batch_id: str) -> tuple[int, dict]:
        batch = self.batches.get(batch_id)
        self.batch_checks[batch_id] += 1
        if batch is None or batch["_number"] <= self.batch_faults.lose_batches:
            return 404, {"error": {"message": f"No batch found with id '{batch_id}'."}}
        with self._lock:
            due = batch["status"] == "in_progress" and time.monotonic() - batch["_created"] >= self.batch_seconds
            if due:
                batch["status"] = "finalizing"  # processed once, however many checks come at once
        if due:
            self._process(batch)
        return 200, self._public(batch)

    def cancel_batch(self, batch_id: str) -> tuple[int, dict]:
        batch = self.batches.get(batch_id)
        if batch is None:
            return 404, {"error": {"message": f"No batch found with id '{batch_id}'."}}
        with self._lock:
            due = batch["status"] == "in_progress"
            if due:
                batch["status"] = "cancelling"
        if due:
            self._process(batch, cancelled=True)
        return 200, self._public(batch)

    @staticmethod
    def _public(batch: dict) -> dict:
        return {k: v for k, v in batch.items() if not k.startswith("_")}

    def _process(self, batch: dict, cancelled: bool = False) -> None:
        """Answer the batch's lines as the synchronous endpoints would, into an output and an error file."""
        faults, number = self.batch_faults, batch["_number"]
        if number <= faults.reject_batches:
            batch.update(
                status="failed",
                errors={
                    "object": "list",
                    "data": [
                        {"code": "invalid_request", "message": "injected: the input file failed validation", "line": 1}
                    ],
                },
            )
            return
        lines = [json.loads(line) for line in self.files[batch["input_file_id"]].splitlines() if line.strip()]
        expires = number <= faults.expire_batches
        answered, failed = [], []
        for index, line in enumerate(lines):
            body, custom_id = line["body"], line["custom_id"]
            key = request_key(json.dumps(body, sort_keys=True).encode())
            entry = {"id": f"batch_req_{number}_{index}", "custom_id": custom_id}
            if cancelled or (expires and index >= len(lines) // 2):
                code = "batch_cancelled" if cancelled else "batch_expired"
                failed.append(entry | {"response": None, "error": {"code": code, "message": f"injected: {code}"}})
                continue
            if line["url"] != batch["endpoint"] or (
                self.azure_deployments and body.get("model") not in self.azure_deployments
            ):
                failed.append(
                    entry
                    | {
                        "response": {
                            "status_code": 400,
                            "body": {
                                "error": {
                                    "message": f"url {line['url']} or model {body.get('model')} is not the batch's"
                                }
                            },
                        },
                        "error": None,
                    }
                )
                continue
            if _picked(key, faults.failed_line_every):
                failed.append(
                    entry
                    | {
                        "response": {"status_code": 500, "body": {"error": {"message": "injected: the line failed"}}},
                        "error": None,
                    }
                )
                continue
            if batch["endpoint"].endswith("/embeddings"):
                status, payload = self.embeddings_response(body, key, via="batch")
            else:
                kind, reply, finish_reason = self.chat_content(body, key)
                status, payload = 200, self.chat_completion(body, key, kind, reply, finish_reason, via="batch")
            (answered if status == 200 else failed).append(
                entry | {"response": {"status_code": status, "request_id": entry["id"], "body": payload}, "error": None}
            )
        for name, entries in (("output_file_id", answered), ("error_file_id", failed)):
            if entries:
                batch[name] = self.upload("".join(json.dumps(e) + "\n" for e in entries).encode(), "batch_output")["id"]
        batch["request_counts"] = {"total": len(lines), "completed": len(answered), "failed": len(failed)}
        batch["status"] = "cancelled" if cancelled else "expired" if expires else "completed"
