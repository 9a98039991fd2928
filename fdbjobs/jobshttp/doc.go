// Package jobshttp serves a fdbjobs Client's kinds over HTTP, for the
// consumers and dashboards outside the process: a kind's counts and its
// event feed, read as CouchDB's _changes feed is (normal, longpoll or
// continuous), and a web page for the people who run the jobs. It
// authenticates nobody: mount it behind your own authentication (fdbrep
// serves it under /_jobs/ to server admins).
//
// The web page, under /_ui/, is server-rendered HTML (html/template, no
// front-end framework): the kinds with their counts by state (refreshed
// every 2 s), feed and pause/resume; the schedules with their period, next
// and last run, pause/resume and delete; a kind's jobs in each state,
// paged, and a search by id; one job with its arguments, attempts and
// errors, and retry now, cancel and delete. Its actions are POSTed forms,
// which http.CrossOriginProtection refuses when another site's page sends
// them (403, {"error": "forbidden", "reason": "cross-origin request
// refused"}).
//
//	GET /              {"kinds": [the kinds with a timeout, sorted]}
//	GET /{kind}        {"kind", "counts": {pending, running, completed,
//	                   cancelled, discarded}, "feed": {"keep_seconds"} or null}
//	GET /{kind}/_feed  ?since=SEQ|now&limit=N&feed=normal|longpoll|continuous
//	                   &timeout=MS&heartbeat=MS
//
// A normal or longpoll read answers {"results": [events], "last_seq"}; a
// longpoll one waits up to timeout for the first event. A continuous one
// streams one event per line, and a newline every heartbeat while idle,
// until timeout (or the client leaves). Errors are CouchDB-style JSON:
// 400 bad_request for bad parameters, 404 not_found for a kind that does
// not exist (GET /{kind}: not in GET /'s list) or a kind without a feed
// (GET /{kind}/_feed), 410 feed_pruned for a since whose following events were pruned
// (read from since= empty for the oldest kept, knowing some were missed).
package jobshttp
