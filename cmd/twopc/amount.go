package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Amounts, one way in and out: an amount of an asset whose code has a
// scale ("USD/2": 2 decimal places) is written with that many decimal
// places and its code ("22.00 USD/2"); any other (no asset, or a code
// with no scale or a scale of 0) is a whole number, in minor units for no
// asset, which output says once (units). The tool takes amounts as it
// prints them (parseAmount): for an asset with a scale, a bare integer is
// refused, never read as minor units or as whole units unasked; --minor
// gives minor units whatever the asset. --json prints minor units, the
// integers stored, with the asset code beside them.

// scaleOf is the number of decimal places of asset code's amounts: N of
// "CODE/N"; 0 for a code with no scale, and for no asset.
func scaleOf(code string) int {
	_, s, _ := strings.Cut(code, "/")
	n, _ := strconv.Atoi(s)
	return n
}

// minorNote is what output says, once, when it shows amounts of no asset.
const minorNote = "Amounts of no asset are in minor units."

// units writes amounts (see scaled) and notes whether one was of no
// asset, for output to say once that those are minor units.
type units struct{ minor bool }

// of is amount n of asset code as output shows it.
func (u *units) of(n int64, code string, plus bool) string {
	if code == "" {
		u.minor = true
	}
	return scaled(n, code, plus)
}

// note writes minorNote on a line of its own if an amount of no asset
// was shown.
func (u *units) note(w io.Writer) {
	if u.minor {
		fmt.Fprintln(w, minorNote)
	}
}

// errBareInteger is parseAmount's refusal of a whole number for an asset
// whose amounts have decimal places.
var errBareInteger = errors.New("a whole number for an asset with decimal places")

// amountSyntax checks that s can be an amount at all, whatever its asset:
// an optional -, digits, optionally a . and digits, optionally a space and
// an asset code. The asset decides the rest (parseAmount).
func amountSyntax(s string) error {
	num, _, _ := strings.Cut(s, " ")
	num = strings.TrimPrefix(num, "-")
	whole, frac, dot := strings.Cut(num, ".")
	if !digits(whole) || dot && !digits(frac) {
		return fmt.Errorf("%q is not an amount: want digits, with the asset's decimal places (22.00 for USD/2)", s)
	}
	return nil
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// parseAmount reads s, an amount of asset code written as the tool prints
// it: for a code with a scale above 0, exactly that many decimal places
// ("22.00" for USD/2: 2200 minor units), optionally followed by a space
// and the code itself; for any other, a whole number (for no asset, minor
// units). A whole number for a code with a scale is refused with
// errBareInteger: whether 22 means 22.00 or 0.22 is not the tool's guess
// to make.
func parseAmount(s, code string) (int64, error) {
	if err := amountSyntax(s); err != nil {
		return 0, err
	}
	num, suffix, hasSuffix := strings.Cut(s, " ")
	if hasSuffix && suffix != code {
		return 0, fmt.Errorf("%q: the amount is of %s, not %s", s, assetWords(code), suffix)
	}
	scale := scaleOf(code)
	whole, frac, dot := strings.Cut(num, ".")
	switch {
	case scale == 0 && dot:
		if code == "" {
			return 0, fmt.Errorf("%q: an amount of no asset is a whole number of minor units", s)
		}
		return 0, fmt.Errorf("%q: an amount of %s is a whole number", s, code)
	case scale > 0 && !dot:
		return 0, fmt.Errorf("%q: amounts of %s have %d decimal places: write %s: %w",
			s, code, scale, whole+"."+strings.Repeat("0", scale), errBareInteger)
	case len(frac) != scale:
		return 0, fmt.Errorf("%q: amounts of %s have %d decimal places, not %d", s, code, scale, len(frac))
	}
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: out of range: at most %s", s, scaled(1<<63-1, code, false))
	}
	return n, nil
}
