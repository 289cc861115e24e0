/*
 * mend-info --calibrate (mend_info_calib.c): measure the cost model's constants and print them, or
 * write them for MEND_CALIB_FILE with -o FILE.  argv holds the options after --calibrate.
 * Returns the exit status: 0 when at least one transport kind was measured, 1 otherwise, 2 usage.
 */
#ifndef MEND_TOOLS_MEND_INFO_CALIB_H_
#define MEND_TOOLS_MEND_INFO_CALIB_H_

int mendInfoCalib(int argc, char** argv);
void mendInfoCalibUsage(void* file);

#endif
