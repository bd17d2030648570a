#include <math.h>
#include <stdbool.h>
void r_1_32_1_1_128_20_20(float* restrict data0, float* restrict data1, float* restrict data2, float* restrict data3, float* restrict data4, float* restrict data5, float* restrict data6, float* restrict data7, float* restrict data8) {
  #pragma omp parallel for schedule(static)
  for (int ridx0 = 0; ridx0 < 32; ridx0++) {
    int alu0 = (ridx0*400);
    float val1 = data2[ridx0];
    float val2 = data3[ridx0];
    float alu3 = (-val2);
    float val4 = data4[ridx0];
    float val5 = data5[ridx0];
    float val6 = data6[ridx0];
    int alu7 = (ridx0*100);
    float acc0[4];
    #pragma GCC unroll 4
    for (int ridx1103 = 0; ridx1103 < 4; ridx1103++) {
      acc0[ridx1103] = 0.0f;
    }
    for (int ridx100 = 0; ridx100 < 128; ridx100++) {
      int alu8 = (ridx100*12800);
      int alu9 = (alu8+alu0);
      int alu10 = (ridx100*3200);
      int alu11 = (alu10+alu7);
      for (int ridx101 = 0; ridx101 < 20; ridx101++) {
        int alu12 = (ridx101*20);
        int alu13 = (ridx101/2);
        int alu14 = (alu13*10);
        int alu15 = (alu11+alu14);
        for (int ridx102 = 0; ridx102 < 5; ridx102++) {
          int alu16 = (ridx102*4);
          int alu17 = (alu12+alu16);
          int alu18 = (ridx102*2);
          #pragma omp simd
          for (int ridx103 = 0; ridx103 < 4; ridx103++) {
            int alu19 = (alu17+ridx103);
            int alu20 = (alu9+alu19);
            float val21 = data1[alu20];
            float alu22 = (val21+val1);
            float alu23 = (alu22+alu3);
            float alu24 = (alu23*val4);
            float alu25 = (alu24*val5);
            float alu26 = (alu25+val6);
            bool alu27 = (0.0f<alu26);
            float alu28 = (alu27?alu26:0.0f);
            int alu29 = (ridx103/2);
            int alu30 = (alu18+alu29);
            int alu31 = (alu15+alu30);
            float val32 = data7[alu31];
            bool alu33 = (alu28!=val32);
            float alu34 = (alu33?0.0f:1.0f);
            float val35 = data8[alu31];
            float alu36 = (alu34*val35);
            float alu37 = (alu27?alu36:0.0f);
            float val38 = acc0[ridx103];
            float alu39 = __builtin_fmaf(alu37, alu24, val38);
            acc0[ridx103] = alu39;
          }
        }
      }
    }
    float val40 = acc0[0];
    float val41 = acc0[1];
    float alu42 = (val40+val41);
    float val43 = acc0[2];
    float alu44 = (alu42+val43);
    float val45 = acc0[3];
    float alu46 = (alu44+val45);
    data0[ridx0] = alu46;
  }
}
