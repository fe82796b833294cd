package stage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/calibration"
	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/quality"
	"github.com/hfsent/hfsent/internal/spend"
)

// Cascade is the stages of a run, opened in order: a row goes to the
// first, and on to each next one as the engine decides (engine.Stage).
type Cascade []*Stage

// OpenCascade opens each of cfgs with d: every stage but the last
// escalates (its failed rows go on), and only the first reports into
// d.Counters and takes d.Tune (the command's, for its one provider
// account: a queue's shared pause, serve's metrics). On an error the
// stages already opened are closed.
func OpenCascade(ctx context.Context, cfgs []*Config, d Deps) (Cascade, error) {
	var out Cascade
	for i, c := range cfgs {
		di := d
		di.Escalates = i < len(cfgs)-1
		if i > 0 {
			di.Counters, di.Tune = nil, nil
		}
		s, err := Open(ctx, c, di)
		if err != nil {
			out.Close(false)
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Close closes every stage (Stage.Close).
func (c Cascade) Close(leave bool) {
	for _, s := range c {
		s.Close(leave)
	}
}

// Ledger is the run's spend ledger for cfgs, with limit (USD; 0: none):
// nil when no stage reports usage (a chat provider). Stages priced the
// same way (as --fallback-model's is, with the primary's prices) share
// those prices; stages priced apart are each priced for their own model,
// and two that price one model differently are refused.
func Ledger(cfgs []*Config, limit float64) (*spend.Ledger, error) {
	chat := false
	var lists []spend.Prices
	var priced []*Config
	for _, c := range cfgs {
		k, _ := c.Kind()
		chat = chat || k.Chat
		ps, err := c.PriceList()
		if err != nil {
			return nil, err
		}
		if err := c.checkContext(ps); err != nil {
			return nil, err
		}
		if ps.Known() {
			lists, priced = append(lists, ps), append(priced, c)
		}
	}
	if !chat {
		return nil, nil
	}
	if len(lists) == 0 {
		return spend.NewLedger(spend.Prices{}, limit), nil
	}
	same := true
	for _, c := range priced[1:] {
		same = same && c.PriceIn == priced[0].PriceIn && c.PriceOut == priced[0].PriceOut && c.Prices == priced[0].Prices &&
			c.PriceCachedIn == priced[0].PriceCachedIn
	}
	if same {
		return spend.NewLedger(lists[0], limit), nil
	}
	table := map[string]spend.Price{}
	for i, c := range priced {
		p, _ := lists[i].For(c.Model)
		if q, ok := table[c.Model]; ok && q != p {
			return nil, fmt.Errorf("two stages price --model %s differently: give them the same prices", c.Model)
		}
		table[c.Model] = p
	}
	return spend.NewLedger(spend.Table(table, "the stages' prices"), limit), nil
}

// Hash is the hash of a cascade's settings (cfgs, and their answers
// read), hex: each stage's request (its For: provider, model, labels,
// label map, the request's hash), calibration file and escalate-below.
// Two cascades with one hash answer every row alike, so a --resume may
// finish one's rows with the other.
func Hash(cfgs []*Config, answers []Answers) string {
	type st struct {
		For           calibration.For `json:"for"`
		Calibration   string          `json:"calibration_sha256"`
		EscalateBelow float64         `json:"escalate_below"`
	}
	all := make([]st, len(cfgs))
	for i, c := range cfgs {
		all[i] = st{For: answers[i].For, Calibration: answers[i].SHA, EscalateBelow: c.EscalateBelow}
	}
	b, _ := json.Marshal(all)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Engine is the cascade as the engine runs it: each stage's guard, the
// keys of its requests in rc (nil: no response cache), what the run does
// to its answers (answers[i]), its escalate-below and its row deadline.
func (c Cascade) Engine(rc *cache.Cache, answers []*quality.Answers) []engine.Stage {
	out := make([]engine.Stage, len(c))
	for i, s := range c {
		k, _ := s.Config.Kind()
		out[i] = engine.Stage{Guard: s.Guard, Answers: answers[i], EscalateBelow: s.Config.EscalateBelow,
			RowDeadline: s.Config.RowDeadline, Free: !k.Remote}
		if rc != nil {
			out[i].Keys = Keyer(s.Guard.Client())
		}
	}
	return out
}

// Keyer is the keys of client's requests in the response cache; nil for
// a client whose requests cannot be keyed (the embedded model: it is not
// worth a lookup).
func Keyer(client provider.Classifier) *cache.Keyer {
	if k, ok := cache.NewKeyer(KindKey(client), client); ok {
		return &k
	}
	return nil
}

// KindKey is the kind of request a client sends, for its key: chat, or
// the request format of the HF client (hf, tei).
func KindKey(c provider.Classifier) string {
	switch v := c.(type) {
	case *provider.Chat:
		return provider.APIChat
	case *provider.HF:
		return v.API()
	}
	return fmt.Sprintf("%T", c)
}
