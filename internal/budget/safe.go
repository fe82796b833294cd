package budget

// The safe share: what a member goes on sending with once its lease ends
// without a renewal (its database cannot be reached), with no database,
// for its safe window (MemberConfig.SafeFor). Why the cap still holds is in
// docs/guides/budget.md, "When the database is away"; in short, a safe
// share is never above the share the member holds, so it is always within
// the member's charge, which the budget keeps for it until the safe window
// has passed: the charges sum to at most the cap, so the safe shares, and
// any mixture of members on their shares and on their safe shares, do too.

// SafeShare is the safe share of a member granted share, in a budget of
// capacity with members rows (itself included, lapsed ones too): the cap
// divided by the members, rounded down so that the members' safe shares
// never sum above the cap, and never more than its share. A member whose
// share is below the even split (an idle worker, a server with little
// traffic) keeps its share; one above it falls back to the split.
func SafeShare(capacity, members, share int) int {
	if members < 1 || capacity < 1 || share < 1 {
		return 0
	}
	return min(capacity/members, share)
}

// SafeCharge is what counts against the cap for a member once its lease has
// passed: the larger of the safe share granted now and the one it still
// applied when it asked (it learns of the new one only when the answer
// comes, and an answer may be lost), as Charge is for the share.
func SafeCharge(granted, applied int) int { return max(granted, applied, 0) }
