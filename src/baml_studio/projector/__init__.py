"""The projector: bucket notifications to public facts (control plane) and private rows (Lance).

Design and the contracts between the parts: ``docs/projector.md``. Modules:

* :mod:`.errors` — the ``ProjectorError`` tree (transient vs terminal);
* :mod:`.evidence` — ``EvidenceReader``: meta, data, function tables and CAS values by key
  from the bucket (one zstd frame each), verified and decoded;
* :mod:`.gather` — ``gather_root_ended``: for every ``RootEnded`` of one meta object, the
  fold's ``ExecutionInputs`` (meta 1, bounded walk-back, data range, function table);
* :mod:`.project` — pure ``project_execution`` (``project_executions`` for a slice): public
  batches and private rows with deterministic ids;
* :mod:`.lance_store`, :mod:`.value_paths` — the private Lance datasets;
* :mod:`.control_client` — the control plane's workload API;
* :mod:`.messages` — S3 event JSON and evidence keys;
* :mod:`.worker` — one queue message: dispatch, verify, project, write, delete;
* :mod:`.service`, :mod:`.loop` — wiring from a data-plane directory, and the long-running
  loop with the scheduled sweep and compaction; :mod:`.lambda_handler` — the SQS Lambda;
* :mod:`.sweep` — close silent streams' open executions as ``abandoned``;
* :mod:`.replay`, :mod:`.resident_client` — enqueue what the bucket holds but the stores lack;
* :mod:`.compact` — Lance indexes, compaction and version cleanup.

Nothing is imported here, so importing one module does not load Lance or HTTP clients.
"""
