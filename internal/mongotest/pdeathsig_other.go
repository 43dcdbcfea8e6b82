//go:build !linux

package mongotest

import "os/exec"

func setParentDeathSignal(*exec.Cmd) {}
