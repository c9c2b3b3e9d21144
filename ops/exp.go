package ops

import "math"

// expTable[j] = 2^(j/64), a read-only lookup table for ExpNeg.
var expTable = func() (t [64]float32) {
	for j := range t {
		t[j] = float32(math.Exp2(float64(j) / 64))
	}
	return t
}()

const (
	log2eBy64 = 64 / math.Ln2
	// ln2/64 split in two: the high part has 11 significant bits, so k*ln2By64Hi is exact in
	// float32 for every |k| < 2^13 that the cutoff allows.
	ln2By64Hi = 0.010829925537109375
	ln2By64Lo = math.Ln2/64 - ln2By64Hi

	// roundMagic is 1.5*2^23: adding it to a float32 of magnitude below 2^22 rounds the value
	// to an integer held in the low mantissa bits.
	roundMagic = 12582912
	roundBits  = 0x4b400000 // math.Float32bits(roundMagic)

	// expCutoff is where ExpNeg flushes to zero: e^-60 < 1e-26, and every sum ExpNeg feeds
	// (softmax normalisers, nucleus mass) contains the maximum's weight 1, so even 150k such
	// terms change it by less than float64 rounding.
	expCutoff = -60
)

// ExpNeg returns e^x for x <= 0 with a relative error below 3e-7 (float32 precision), and 0 for
// x < expCutoff (including -Inf). Inputs above 0 and NaN are not supported.
//
// Softmax, SwiGLU, sampling and log-probabilities need one exponential per element, so this avoids
// math.Exp and, deliberately, every float conversion instruction: on amd64 those write only
// the low lane of their destination register, and in a summing loop that false dependency
// chains each iteration to the previous one's whole exponential, a fivefold slowdown measured
// on 32000-entry rows. Rounding and scaling therefore go through the bit patterns instead.
func ExpNeg(x float32) float32 {
	if x < expCutoff {
		return 0
	}
	// x = (k/64) ln2 + r with |r| <= ln2/128.
	t := x*log2eBy64 + roundMagic
	k := int32(math.Float32bits(t)) - roundBits
	kf := t - roundMagic
	r := x - kf*ln2By64Hi - kf*ln2By64Lo
	// e^r to degree 3: the first omitted term, r^4/24, is below 4e-11 for |r| <= 0.0055.
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6)))
	// 2^(k/64) = 2^(k>>6) * 2^((k&63)/64); the whole power goes into the exponent bits, which
	// stay normal because k>>6 >= -87 and p*expTable[...] is in [0.99, 2.01].
	return math.Float32frombits(math.Float32bits(p*expTable[k&63]) + uint32(k>>6)<<23)
}
