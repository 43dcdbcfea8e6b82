package mongotest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal kills the dev server if the test binary dies without
// stopping it.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
