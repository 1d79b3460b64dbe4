// @ts-check
// The shapes of what the hub sends the page (docs/protocol.md), for the type checker only
// (`tsc --noEmit`, dev.d/check-js.sh): the other modules name them in JSDoc; nothing
// imports this file at run time.

/** @typedef {"pending" | "claimed" | "running" | "completed" | "failed" | "cancelled"} Status */

/**
 * A task as the page knows it: a REST answer (full, or `view=summary`: no payload, no
 * result, with `submitter`), with the events heard since merged in. Only `id` is sure: the
 * detail panel opens on an id before the hub answers; fields an older hub does not send
 * are undefined.
 * @typedef {object} Task
 * @property {string} id
 * @property {string} [job_name] the job's full name, room:category:name
 * @property {string} [room_id]
 * @property {Status} [status]
 * @property {number} [version] counts the task's writes (newer states have larger ones)
 * @property {string} [created_at]
 * @property {string | null} [started_at]
 * @property {string | null} [completed_at]
 * @property {string | null} [worker_id]
 * @property {string | null} [error]
 * @property {number | null} [queue_position]
 * @property {number} [attempt]
 * @property {number} [max_attempts]
 * @property {number | null} [progress] 0 to 1
 * @property {string | null} [progress_message]
 * @property {string | null} [submitted_by] the submitter's user id
 * @property {string | null} [submitter] the submitter's name (summaries only)
 * @property {string | null} [rerun_of]
 * @property {unknown} [payload]
 * @property {unknown} [result]
 */

/**
 * A `task_status_event`: a task's new state, the job's full name as `name`.
 * @typedef {Omit<Task, "job_name" | "status" | "room_id"> & {
 *   name: string, status: Status, room_id: string }} TaskEvent
 */

/**
 * A `task_log` event: lines of one task's log.
 * @typedef {{ task_id: string, lines?: LogLine[] }} TaskLogEvent
 */

/**
 * @typedef {object} LogLine
 * @property {number} id
 * @property {number} attempt
 * @property {string} at
 * @property {string} level
 * @property {string | null} [logger]
 * @property {string} message
 * @property {number} [dropped] lines the worker dropped just before this one
 */

/** @typedef {{ items: LogLine[], next: number | null }} LogPage */

/**
 * @template T
 * @typedef {{ items: T[], total: number, limit: number, offset: number }} Page
 */

/** @typedef {{ id: string, name: string, is_superuser: boolean }} User */

/**
 * @typedef {object} Job
 * @property {string} full_name
 * @property {string} name
 * @property {string} category
 * @property {string} room_id
 * @property {JsonSchema} schema
 * @property {string[]} workers ids of the workers serving it
 * @property {string} [claim_order] fifo, fair-by-submitter, fair-by-room
 * @property {number | null} [max_running_per_submitter]
 * @property {number | null} [max_running_per_room]
 */

/**
 * A worker as a room's listing shows it.
 * @typedef {object} Worker
 * @property {string} id
 * @property {string} [last_heartbeat]
 * @property {string} [owned_by] its owner's user id
 * @property {string} [user_id] the same, as older hubs call it
 * @property {string} [owner] its owner's name
 * @property {(string | { full_name?: string, name?: string })[]} [jobs]
 * @property {number} [job_count]
 * @property {number | null} [slots]
 * @property {number} [used]
 * @property {string[]} [running]
 */

/**
 * A provider as a room's listing shows it (GET /rooms/{room}/providers).
 * @typedef {object} Provider
 * @property {string} id
 * @property {string} room_id
 * @property {string} category
 * @property {string} name
 * @property {string} full_name
 * @property {Record<string, any>} schema the JSON schema of a read's parameters
 * @property {string | null} worker_id null: an @internal provider, the hub's own
 * @property {string} [content_type] the media type of its answers
 */

/**
 * A provider's answer to a read: its media type, and its body as JSON when it is JSON,
 * else as bytes.
 * @typedef {object} ProviderAnswer
 * @property {string} contentType
 * @property {unknown} [json]
 * @property {Blob} [blob]
 * @property {number} size bytes
 */

/**
 * Where a pending task stands (GET /tasks/{id}/place).
 * @typedef {object} Place
 * @property {Status} status
 * @property {number | null} queue_position
 * @property {string} claim_order
 * @property {number | null} max_running_per_submitter
 * @property {number | null} max_running_per_room
 * @property {{ scope: "submitter" | "room", running: number, limit: number } | null} held_back
 */

/**
 * @typedef {{ job: string } & Partial<Record<Status, number>>} JobCounts
 */

/**
 * The figures of one bucket of the room's window (times in seconds, null without tasks).
 * @typedef {object} BucketFigures
 * @property {number} completed
 * @property {number} failed
 * @property {number} cancelled
 * @property {number} queue_depth
 * @property {number | null} wait_p50
 * @property {number | null} wait_p95
 * @property {number | null} run_p50
 * @property {number | null} run_p95
 */

/** @typedef {BucketFigures & { start: string }} Bucket */

/**
 * @typedef {object} Stats
 * @property {string} window
 * @property {string} [until]
 * @property {JobCounts[]} [counts]
 * @property {Bucket[]} buckets
 */

/** @typedef {{ matched: number, succeeded: number, refused: number }} BulkResult */

/**
 * An RFC 9457 problem, with a 422's `errors`.
 * @typedef {object} Problem
 * @property {string} [title]
 * @property {string} [detail]
 * @property {{ loc?: (string | number)[], msg?: string }[]} [errors]
 */

/**
 * A JSON Schema (as pydantic writes them), as far as the form reads one.
 * @typedef {{ [keyword: string]: any }} JsonSchema
 */

/**
 * The table's filter: what GET /rooms/{room}/tasks and the bulk endpoint take.
 * @typedef {object} TaskFilter
 * @property {Status[]} status
 * @property {string} job
 * @property {string} submitted_by a user id, or "me"
 * @property {string} worker_id
 * @property {string} q
 */

export {};
