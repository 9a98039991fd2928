// Package frontend is the HTTP API of fdbrep's api_frontend nodes: a
// CouchDB-compatible server for replicator databases (stored by package
// repdb) and the replication endpoints. It reaches the replicator only
// through the ports of ports.go (Replicator, Scheduler, MetricsSource),
// declared in package api's types, which the control plane satisfies as
// it is (cmd/internal/wire plugs it in; cmd/internal/node builds both for
// fdbrep serve), and it maps every error to
// a CouchDB reply in one place (toHTTPError): repdb's sentinels and the
// ports' tagged errors.
//
// # Endpoints
//
//	GET  /  /_up  /_uuids  /_all_dbs (admins, see PublicAllDBs; startkey, endkey, limit, skip, descending)
//	GET  /_utils/…                            Fauxton's files (UtilsDir); /_utils redirects to /_utils/
//	GET|POST|DELETE /_session                 cookie login (AuthSession; "name" or "username"), as CouchDB
//	PUT|GET|HEAD|DELETE|POST /{db}            _replicator and <prefix>/_replicator ('/' as %2F)
//	PUT|GET|HEAD|DELETE /{db}/{docid}         documents, also _design/… and _local/…; GET with rev, revs,
//	                                          open_revs, latest, conflicts, deleted_conflicts, revs_info, meta;
//	                                          PUT with new_edits=false
//	GET|POST /{db}/_all_docs                  keys, include_docs, conflicts, startkey, endkey, limit, skip, descending
//	GET|POST /{db}/_changes                   feed=normal|longpoll|continuous|live|eventsource; since (now), limit,
//	                                          style=all_docs, include_docs, conflicts, heartbeat, timeout, filter=_doc_ids
//	POST /{db}/_bulk_docs  /{db}/_bulk_get  /{db}/_revs_diff  /{db}/_ensure_full_commit
//	GET|PUT /{db}/_security                   the security object: members read it, admins of the db change it
//	POST /_replicate                          any authenticated user
//	GET  /_scheduler/jobs[/{id}]  /_scheduler/docs[/{db}[/{docid}]]  /_active_tasks   admins; users: see below
//	POST /_scheduler/jobs/{id}/_retry         a crashing job's backoff ends now: admins, the job's owner
//	POST /_scheduler/jobs/{id}/_pause|_resume a POST /_replicate replication paused, resumed: admins, the job's owner
//	GET  /_scheduler/_changes                 the replications' state changes: admins all, users their own
//	GET  /_scheduler/webhooks  GET|PUT|DELETE /_scheduler/webhooks/{id}   the caller's webhooks (webhooks.go)
//	GET  /_node/_local/_stats[/{path}]  /_node/_local/_prometheus                       admins, _metrics role
//	GET  /_node/_local  /_membership                                                    admins
//	GET|PUT|DELETE /_node/{node}/_config[/{section}[/{key}]]  runtime configuration (config.go), admins;
//	                                          {node}: _local, a node's name, or _cluster (every node)
//
// HEAD is answered wherever GET is, as CouchDB answers it. What fdbrep
// does not have answers as such (unsupported.go): a standalone attachment
// PUT is 415 as any attachment; _find, _index, _design_docs, views and
// the other database endpoints of unsupportedDBEndpoints are 400
// "Unsupported endpoint …", whatever the method.
//
// Replies have CouchDB's shapes and statuses, errors are
// {"error": …, "reason": …}, also for the requests net/http refuses
// itself before any handler runs (trackedConn.Write; plain text under
// TLS). Only replicator databases are served: other names get 400
// illegal_database_name with the rule spelled out.
//
// # Storage
//
// Documents are stored by package repdb (see its doc for the layout and
// revision trees). Whatever the endpoint (PUT, POST /{db}, DELETE,
// _bulk_docs, with or without new_edits=false), a document write goes
// through saveDoc and is one small transaction (repdb.Store.Write for new
// edits: the base revision must be a leaf, 409 conflict otherwise;
// repdb.Store.WriteReplicated for replicated revisions: merged into the
// tree), and, for replication documents, the Replicator's DocWritten or
// DocDeleted runs in that same transaction whenever the winning revision
// changes, so a document and its job commit together or not at all.
// _bulk_docs writes its documents one transaction each, up to eight at
// once (a document's versions in their order): a failure is that
// document's alone. Replicators read replicator databases
// as CouchDB's (_changes with style=all_docs, _bulk_get, open_revs as
// JSON, _revs_diff), so they can be migrated in from CouchDB and backed up
// out, conflicts included. Attachments are refused (415).
//
// # Changes feeds
//
// Feeds are read page by page (repdb.Store.Feed) and streamed: normal,
// longpoll (which waits for a change, writing heartbeats meanwhile when
// asked), continuous (a row per line, blank-line heartbeats, a last_seq
// line at the end) and eventsource (server-sent events). Waiting feeds
// wait on the database's watch, end after timeout of silence without a
// heartbeat (at most LongpollTimeoutDefault), and let the node close
// their connection when it is full.
//
// # Validation and owners
//
// Bodies are capped (MaxRequestSize, 413), must be one JSON object in
// valid UTF-8 nested at most MaxJSONDepth deep (400), and documents at
// most MaxDocumentSize (413). A replication document is checked before
// anything is written: CouchDB's owner rules (a missing "owner" becomes
// the writer; only admins write other users' documents) — and, unlike
// CouchDB, the owner of the revision being replaced or deleted is checked
// too — then the replicator's parser (Replicator.ParseDoc, once per
// write: its result travels to DocWritten) and, for writers without the
// _replicator role, the resolution of its endpoints' host names
// (Replicator.CheckEndpoints: names that resolve only to addresses
// [replicator] denies); a failure is 403 forbidden with the parser's
// reason and stores nothing. Replicated revisions are
// checked the same way (in _bulk_docs a refusal is that document's
// "forbidden" entry). When a job runs again, the replicator's stale
// "_replication_*" fields are removed from the document. Design documents
// (admins only) and _local documents are stored but never reach the
// replicator. Readers other than a document's owner, admins and holders
// of the _replicator role get its endpoints without credentials (URL
// userinfo, "auth" and "headers" removed), whichever endpoint they read
// it through (GET, _bulk_get, open_revs, _all_docs and _changes with
// include_docs, every feed); readers who are not server admins read a
// refused address's _replication_state_reason as
// couch.AddressDeniedReason alone.
//
// # Authentication
//
// Accounts come from configuration: server admins ([admins], CouchDB's
// password hash formats; plaintext is hashed when loaded) and, as an
// fdbrep extension, non-admin users ([users], [user_roles]); changes made
// at run time through /_node/{node}/_config reach the server through
// SetAccounts. Requests
// authenticate with Basic auth (wrong credentials: 401 on any endpoint, as
// CouchDB) or an AuthSession cookie signed with HMAC-SHA256 over the
// server secret and the account's password hash (so changing a password
// revokes its cookies), valid for SessionTimeout and refreshed after a
// tenth of it, SameSite Lax unless configured (Options.SameSite).
// Verified credentials are cached (AuthCacheSize) so PBKDF2 does not run
// on every request; a name nobody has is checked against a dummy hash of
// the configured cost (Options.PasswordHashing), so that login timing
// does not tell which names exist. Requests go through the
// authentication handlers of Options.AuthHandlers ([chttpd]
// authentication_handlers) in order, the first to find a user or refuse
// the request deciding (authhandlers.go): besides Basic (AuthDefault) and
// the cookie (AuthCookie, first by default, as in CouchDB), JWTs
// (AuthJWT, jwt.go: HS, RS and ES tokens checked by golang-jwt with the
// keys of [jwt_keys], their claims with CouchDB's rules and replies) and
// a proxy's headers (AuthProxy, with an HMAC token under [chttpd_auth]
// proxy_use_secret); their users need not be accounts, and their roles
// come from the token or the headers. Anonymous users may use /, /_up, /_uuids,
// /_session and /_utils only (the dashboard then asks them to log in);
// database creation and deletion, _all_dbs and _node need a server admin
// (401 "You are not a server admin.").
//
// # Users and security objects
//
// A replicator database is used by the users its security object
// (GET|PUT /{db}/_security, stored by repdb) admits, as CouchDB's
// is_member: server admins, its admins and members by name or role, and
// every user when "members" names no one ({} by default); others get 403
// forbidden, anonymous clients 401 (dbUser, one read before the request's
// own). Admins of the database have CouchDB's check_is_admin rights in it
// (others' documents whole and editable, design documents) and change the
// security object, in a transaction that checks the object it replaces.
// Users who are not server admins see the jobs they own in
// _scheduler/jobs, _scheduler/jobs/{id} and _active_tasks (the ports
// take the viewer, User.Viewer: paged among their own rows), and
// the rows of the databases they are members of in _scheduler/docs/{db}
// (/_scheduler/docs: _replicator's, as in CouchDB), another user's row as
// they read that user's document (docRowFor: no remote user names, none
// of the peers' messages).
//
// # Fauxton
//
// CouchDB's dashboard is a set of static files (the npm package fauxton's
// prebuilt dist/release) that talks to this API from the browser.
// Options.UtilsDir names their directory, which New checks for index.html;
// handleUtils serves them under /_utils/ (no directory listings, nothing
// outside the directory, a Content-Security-Policy that allows this
// server only). Without UtilsDir, /_utils answers 404 with how to install
// them. The replication screens use only endpoints of this package; the
// browser test in cmd/internal/wire checks each of them.
//
// # Logging
//
// One zerolog line per request (LogRequests) with method, escaped path,
// status, user, remote address, size (bytes), duration (duration_ms, in
// milliseconds) and request_id: the X-Couch-Request-ID every response
// carries, as CouchDB's do, with X-CouchDB-Body-Time (the milliseconds
// spent reading the body). Query strings, headers and bodies are never
// logged, and error replies never carry storage errors' text, so
// credentials cannot leak through logs.
//
// Server is an http.Handler: the caller owns the listener and its
// shutdown. Init creates _replicator when missing.
package frontend
