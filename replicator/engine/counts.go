package engine

// Count is an event of a run that CouchDB's couch_replicator stats count
// (Options.Count). Name gives CouchDB's name of the stat.
type Count int

// The events Options.Count is told of. CouchDB's replication job is
// processes (a changes reader, a changes queue and its manager, workers)
// whose deaths it counts; a run is goroutines, and a goroutine "dies"
// when it returns the error that fails the run.
const (
	// CountWorkerStarted is a worker started (workers_started):
	// worker_processes of them at each start of a run that got through
	// its setup.
	CountWorkerStarted Count = iota
	// CountWorkerDeath is a worker that failed the run (worker_deaths).
	CountWorkerDeath
	// CountFailedStart is a run whose setup failed (failed_starts): a
	// database that cannot be opened, a refused login, a filter that
	// cannot be read, … Setups that Stop, Halt or the run's context
	// ended do not count.
	CountFailedStart
	// CountChangesReadFailure is a changes request that failed after the
	// client's retries, or whose reply broke while it was read
	// (changes_read_failures): the reader resumes the feed or fails the
	// run.
	CountChangesReadFailure
	// CountChangesReaderDeath is a changes reader that failed the run
	// (changes_reader_deaths).
	CountChangesReaderDeath

	// CountMax bounds the Counts.
	CountMax
)

var countNames = [CountMax]string{"workers_started", "worker_deaths", "failed_starts", "changes_read_failures",
	"changes_reader_deaths"}

// Name is CouchDB's name of c's stat under couch_replicator.
func (c Count) Name() string { return countNames[c] }

func (c Count) String() string { return c.Name() }

// count tells Options.Count of c.
func (r *Run) count(c Count) {
	if r.opts.Count != nil {
		r.opts.Count(c)
	}
}
