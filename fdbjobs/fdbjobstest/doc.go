// Package fdbjobstest helps test code that inserts and works fdbjobs'
// runtime jobs, as rivertest does River's: a Client on a store in memory
// (NewClient), assertions on the jobs inserted (RequireInserted,
// RequireNotInserted, Jobs), one job worked synchronously by a Worker on
// a store of its own (Work), and the schedules due at a time of the
// test's choosing fired (FireSchedules).
//
//	func TestSignup(t *testing.T) {
//		c := fdbjobstest.NewClient(t)
//		require.NoError(t, signup(ctx, c, "ada@example.com")) // inserts an EmailArgs job
//		fdbjobstest.RequireInserted(t, c, EmailArgs{To: "ada@example.com"})
//
//		res := fdbjobstest.Work(t, &EmailWorker{}, EmailArgs{To: "bob@example.com"}, fdbjobstest.WorkOptions{})
//		require.NoError(t, res.Err)
//		require.Equal(t, fdbjobs.OutcomeCompleted, res.Job.Outcome)
//	}
package fdbjobstest
