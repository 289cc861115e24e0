/*
 * mend-info --ras: who is late (mend_info_ras.c).  argv holds the options after --ras.
 * Returns the exit status: 0 answered (whatever it found), 1 no process could be asked, 2 usage.
 */
#ifndef MEND_TOOLS_MEND_INFO_RAS_H_
#define MEND_TOOLS_MEND_INFO_RAS_H_

int mendInfoRas(int argc, char** argv);
void mendInfoRasUsage(void* file);

#endif
