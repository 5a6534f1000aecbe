/* SPDX-License-Identifier: MIT */
/* `device add` and `device remove` (device_change.c), for the `device` dispatcher. */
#ifndef UBTRFS_CMD_DEVICE_CHANGE_H
#define UBTRFS_CMD_DEVICE_CHANGE_H

int cmd_device_add(int argc, char **argv);
int cmd_device_remove(int argc, char **argv);

#endif
