-- newest-id: the id of an event log's newest entry, without copying that entry (up to ~1 MB) into the script or the
-- reply: from the meta hash's record of it, checked (includes/log-newest.lua).
-- KEYS[1] events (stream)  KEYS[2] the session's meta hash (its `ev_last`: includes/event-log.lua)
-- ARGV[1] none: the script takes no arguments
-- Returns the id, or false when the log is empty or gone.
--- @include "includes/log-newest"
return log_newest(KEYS[1], KEYS[2])
