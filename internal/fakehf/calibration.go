package fakehf

import (
	"os"

	"github.com/hfsent/hfsent/internal/calibration"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/quality"
)

// WriteLocalCalibration writes, at path, a calibration of the embedded
// model (--provider local, no label map) that believes each label of
// probs with that probability, whatever its score: a stage of a test's
// cascade that sends on, say, every NEUTRAL answer (a probability under
// its escalate-below). A real one is fitted by hfsent calibrate.
func WriteLocalCalibration(path string, probs map[string]float64) error {
	local := provider.NewLocal()
	f := &calibration.File{Format: calibration.Format, Method: calibration.Method, PriorRows: calibration.PriorRows,
		MinLabelRows: calibration.MinLabelRows, Labels: map[string]calibration.Curve{}, Counts: map[string]int64{},
		For: calibration.For{Provider: "local", Model: provider.LocalModel, Labels: []string{},
			Request: calibration.RequestHash("local", local)},
		Pooled: calibration.Curve{Rows: 1, Points: []calibration.Point{{0, 0.5}, {1, 0.5}}}}
	for label, p := range probs {
		f.Labels[quality.Key(label)] = calibration.Curve{Rows: 100, Points: []calibration.Point{{0, p}, {1, p}}}
		f.Counts[label] = 100
		f.Rows += 100
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Write(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
