"""tegrastats parsing on real sample lines, the monitor, and energy per inference.

The sample lines are copied verbatim from real boards' output as recorded in DataDog/datadog-agent
(jetson_test.go), rbonghi/jetson_stats (test_06_tegra_parse.py) and NVIDIA/skills (tegrastats-fields.md).  ``fake_tegrastats`` stands in for the Jetson binary, which does not exist here.
"""

import stat
import sys
import textwrap
import time

import pytest

from jetforge.errors import DependencyError
from jetforge.runtime.tegrastats import TegrastatsMonitor, energy_per_inference, parse_line, parse_lines

NANO = ("RAM 534/3964MB (lfb 98x4MB) SWAP 5/1982MB (cached 1MB) IRAM 0/252kB(lfb 252kB) CPU [16%@204,9%@204,0%@204,"
        "0%@204] EMC_FREQ 0%@204 GR3D_FREQ 0%@76 APE 25 PLL@34C CPU@36.5C PMIC@100C GPU@36C AO@39.5C thermal@36.25C "
        "POM_5V_IN 1022/1022 POM_5V_GPU 0/0 POM_5V_CPU 204/204")
TX2 = ("RAM 2344/7852MB (lfb 1154x4MB) SWAP 0/3926MB (cached 0MB) CPU [1%@345,off,off,1%@345,0%@345,2%@345] "
       "EMC_FREQ 4%@1600 GR3D_FREQ 0%@624 APE 150 PLL@37.5C MCPU@37.5C PMIC@100C Tboard@32C GPU@35C BCPU@37.5C "
       "thermal@36.5C Tdiode@34.25C VDD_SYS_GPU 152/152 VDD_SYS_SOC 687/687 VDD_4V0_WIFI 0/0 VDD_IN 3056/3056 "
       "VDD_SYS_CPU 152/152 VDD_SYS_DDR 883/883")
AGX_XAVIER = ("RAM 721/31927MB (lfb 7291x4MB) SWAP 0/15963MB (cached 0MB) CPU [2%@1190,0%@1190,0%@1190,0%@1190,off,"
              "off,off,off] EMC_FREQ 0%@665 GR3D_FREQ 0%@318 APE 150 MTS fg 0% bg 0% AO@37.5C GPU@37.5C Tdiode@40C "
              "PMIC@100C AUX@36C CPU@37.5C thermal@36.9C Tboard@37C GPU 0/0 CPU 311/311 SOC 932/932 CV 0/0 "
              "VDDRQ 621/621 SYS5V 1482/1482")
XAVIER_NX = ("RAM 4412/7772MB (lfb 237x4MB) SWAP 139/3886MB (cached 2MB) CPU [9%@1190,6%@1190,6%@1190,5%@1190,"
             "4%@1190,8%@1267] EMC_FREQ 10%@1600 GR3D_FREQ 62%@306 APE 150 MTS fg 0% bg 0% AO@41.5C GPU@43C "
             "PMIC@100C AUX@41.5C CPU@43.5C thermal@42.55C VDD_IN 4067/4067 VDD_CPU_GPU_CV 738/738 VDD_SOC 1353/1353")
ORIN_NX = ("RAM 6334/15388MB (lfb 1770x4MB) SWAP 491/7694MB (cached 0MB) CPU [6%@729,9%@729,5%@729,16%@729,off,off,"
           "off,off] EMC_FREQ 0%@2133 GR3D_FREQ 0%@611 VIC_FREQ 729 APE 174 CV0@45.812C CPU@47.937C SOC2@46.093C "
           "SOC0@46.968C CV1@46.406C GPU@45.875C tj@48.875C SOC1@48.875C CV2@45.75C VDD_IN 5299mW/5299mW "
           "VDD_CPU_GPU_CV 773mW/773mW VDD_SOC 1424mW/1424mW")
AGX_ORIN_R36 = ("RAM 29114/30697MB (lfb 3x4MB)    SWAP 4915/15348MB (cached 1MB) CPU [3%@729,...,0%@2201] "
                "EMC_FREQ 1%@2133 GR3D_FREQ 0%@[305,305] NVENC      off  NVDEC    off NVJPG off NVJPG1    off         "
                "VIC        off          OFA           off          NVDLA0    off       NVDLA1     off          "
                "PVA0_FREQ off         APE           174        cpu@53.062C soc2@48.25C soc0@48.843C  gpu@47.812C "
                "tj@53.062C soc1@48.968C    VDD_GPU_SOC 3205mW/3205mW VDD_CPU_CV 4405mW/4405mW "
                "VIN_SYS_5V0 4767mW/4767mW")
AGX_ORIN_DLA = ("11-21-2025 08:49:48 RAM 13983/62780MB (lfb 424x4MB) SWAP 126/31390MB (cached 0MB) CPU [90%@2201,"
                "100%@2201,...] EMC_FREQ 1%@2133 GR3D_FREQ 14%@[407,407] VIC_FREQ 115 NVDLA0_FREQ @1600 APE 174 "
                "CV0@73.625C CPU@77.281C Tboard@62C SOC2@70C Tdiode@62.25C SOC0@69.531C CV1@72.5C GPU@69.125C "
                "tj@77.281C SOC1@68.968C CV2@67.25C VDD_GPU_SOC 3150mW/2971mW VDD_CPU_CV 14312mW/12415mW "
                "VIN_SYS_5V0 4968mW/5048mW VDDQ_VDD2_1V8AO 1091mW/1091mW")
AGX_ORIN_JP72 = ("07-25-2026 09:08:28 RAM 20642/62817MB (lfb 1x2MB) CPU [23%@2201,...] EMC_FREQ 3%@3199 "
                 "GR3D_FREQ 12%@[1300,1300] NVENC0 off NVDEC0 off NVJPG0 off NVJPG1 off VIC off OFA off NVDLA0 off "
                 "NVDLA1 off PVA0_FREQ off APE 174 cpu@52.968C/52.968C soc2@48.406C/48.406C soc0@49.531C/49.531C "
                 "gpu@47.625C/47.625C VDD_GPU_SOC 5139mW/5139mW/5139mW VDD_CPU_CV 3268mW/3268mW/3268mW "
                 "VIN_SYS_5V0 5500mW/5500mW/5500mW")
THOR = ("04-21-2026 15:50:52 RAM 105265/125772MB (lfb 34x4MB) CPU [0%@972,...] EMC_FREQ 0%@2750 "
        "GR3D_FREQ @[314,314,314] NVENC0_FREQ @314 ... VIC off OFA_FREQ @315 PVA0_FREQ off APE 300 cpu@37.343C "
        "tj@38.875C soc012@37.468C gpu@38.875C soc345@37.406C VDD_GPU 1962mW/1962mW VDD_CPU_SOC_MSS 5887mW/5887mW "
        "VIN_SYS_5V0 5635mW/5635mW VIN 19780mW/19780mW")
ALL = [NANO, TX2, AGX_XAVIER, XAVIER_NX, ORIN_NX, AGX_ORIN_R36, AGX_ORIN_DLA, AGX_ORIN_JP72, THOR]


def test_jetson_nano_l4t32_without_mw_suffix():
    s = parse_line(NANO)
    assert (s.ram_used_mb, s.ram_total_mb, s.lfb_blocks, s.lfb_block_size) == (534, 3964, 98, "4MB")
    assert (s.swap_used_mb, s.swap_total_mb, s.swap_cached_mb) == (5, 1982, 1)
    assert (s.iram_used_kb, s.iram_total_kb) == (0, 252)
    assert s.cpu == [(16, 204), (9, 204), (0, 204), (0, 204)]
    assert (s.emc_load, s.emc_freq_mhz, s.gpu_load, s.gpu_freq_mhz) == (0, 204, 0, [76])
    assert s.engines["APE"] == "25"
    assert s.temperatures == {"PLL": 34.0, "CPU": 36.5, "PMIC": 100.0, "GPU": 36.0, "AO": 39.5, "thermal": 36.25}
    assert set(s.rails) == {"POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"}
    assert (s.rails["POM_5V_IN"].current_mw, s.rails["POM_5V_IN"].average_mw) == (1022.0, 1022.0)
    assert (s.total_power_mw, s.total_power_source) == (1022.0, "POM_5V_IN")
    assert s.timestamp is None and s.dla_active == {}


def test_tx2_cores_off_and_vdd_in():
    s = parse_line(TX2)
    assert s.cpu == [(1, 345), None, None, (1, 345), (0, 345), (2, 345)]
    assert len(s.rails) == 6 and s.rails["VDD_SYS_DDR"].current_mw == 883.0
    assert (s.total_power_mw, s.total_power_source) == (3056.0, "VDD_IN")
    assert s.temperatures["Tdiode"] == 34.25 and s.temperatures["MCPU"] == 37.5


def test_agx_xavier_sums_rails_without_an_input_rail():
    s = parse_line(AGX_XAVIER)
    assert s.mts == (0, 0)
    assert s.cpu[4:] == [None, None, None, None]
    # "GPU 0/0" and "CPU 311/311" are rails; "GPU@37.5C" and "CPU@37.5C" temperatures
    assert s.rails["GPU"].current_mw == 0.0 and s.rails["CPU"].current_mw == 311.0
    assert s.temperatures["GPU"] == 37.5 and s.temperatures["CPU"] == 37.5
    assert s.total_power_mw == 0 + 311 + 932 + 0 + 621 + 1482
    assert s.total_power_source == "sum:GPU+CPU+SOC+CV+VDDRQ+SYS5V"


def test_xavier_nx_and_orin_nx():
    nx = parse_line(XAVIER_NX)
    assert (nx.gpu_load, nx.gpu_freq_mhz, nx.total_power_mw) == (62, [306], 4067.0)
    assert nx.cpu[-1] == (8, 1267)
    orin = parse_line(ORIN_NX)
    assert orin.rails["VDD_IN"].current_mw == 5299.0 and orin.total_power_source == "VDD_IN"
    assert orin.engines["VIC_FREQ"] == "729"
    assert orin.temperatures["CV0"] == 45.812 and orin.temperatures["tj"] == 48.875


def test_agx_orin_r36_whitespace_runs_gpc_array_and_dla_off():
    s = parse_line(AGX_ORIN_R36)
    assert (s.ram_used_mb, s.swap_used_mb) == (29114, 4915)
    assert s.cpu == [(3, 729), (0, 2201)]  # the "..." elision of the reference sample is skipped
    assert (s.gpu_load, s.gpu_freq_mhz) == (0, [305, 305])
    assert s.dla_active == {"NVDLA0": None, "NVDLA1": None}
    assert s.engines["NVENC"] is None and s.engines["PVA0_FREQ"] is None and s.engines["APE"] == "174"
    assert set(s.rails) == {"VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0"}
    assert s.total_power_mw == 3205 + 4405 + 4767


def test_agx_orin_dla_active_with_timestamp():
    s = parse_line(AGX_ORIN_DLA)
    assert s.timestamp == "11-21-2025 08:49:48"
    assert s.dla_active == {"NVDLA0": 1600}
    assert (s.gpu_load, s.gpu_freq_mhz) == (14, [407, 407])
    assert s.rails["VDD_CPU_CV"].current_mw == 14312.0 and s.rails["VDD_CPU_CV"].average_mw == 12415.0
    assert s.total_power_mw == 3150 + 14312 + 4968 + 1091


def test_jetpack72_three_value_rails_and_temperature_max():
    s = parse_line(AGX_ORIN_JP72)
    assert s.swap_used_mb is None and s.lfb_block_size == "2MB"
    rail = s.rails["VDD_GPU_SOC"]
    assert (rail.current_mw, rail.average_mw, rail.max_mw) == (5139.0, 5139.0, 5139.0)
    assert s.temperatures["cpu"] == 52.968 and s.temperature_max["cpu"] == 52.968
    assert (s.emc_load, s.emc_freq_mhz, s.gpu_load, s.gpu_freq_mhz) == (3, 3199, 12, [1300, 1300])
    assert s.dla_active == {"NVDLA0": None, "NVDLA1": None}


def test_thor_gr3d_without_load_and_vin_total():
    s = parse_line(THOR)
    assert s.gpu_load is None and s.gpu_freq_mhz == [314, 314, 314]
    assert s.dla_active == {}
    assert s.engines["NVENC0_FREQ"] == "314" and s.engines["OFA_FREQ"] == "315" and s.engines["VIC"] is None
    assert (s.total_power_mw, s.total_power_source) == (19780.0, "VIN")


def test_negative_temperature_and_blank_or_foreign_lines():
    s = parse_line(ORIN_NX.replace("CV0@45.812C", "CV0@-256C"))
    assert s.temperatures["CV0"] == -256.0
    assert parse_line("") is None and parse_line("   \n") is None
    assert parse_line("tegrastats: not running as root, rails hidden") is None


def test_every_reference_sample_parses():
    samples = parse_lines(ALL)
    assert len(samples) == len(ALL)
    assert all(s.ram_total_mb and s.emc_freq_mhz for s in samples)
    assert all(s.total_power_mw and s.total_power_mw > 0 for s in samples)


def test_energy_per_inference_from_rails():
    samples = parse_lines([ORIN_NX, ORIN_NX.replace("VDD_IN 5299mW/5299mW", "VDD_IN 6299mW/5799mW")])
    report = energy_per_inference(samples, inferences=1000, duration_s=2.0)
    assert report.rail == "VDD_IN" and report.samples == 2
    assert report.mean_power_w == pytest.approx(5.799)
    assert report.energy_j == pytest.approx(11.598)
    assert report.mj_per_inference == pytest.approx(11.598)
    # no rails (tegrastats not run as root): unknown, not zero
    no_rails = parse_lines([ORIN_NX.split(" VDD_IN")[0]])
    assert no_rails[0].rails == {} and energy_per_inference(no_rails, 10, 1.0) is None


@pytest.fixture
def fake_tegrastats(tmp_path):
    """An executable named ``fake_tegrastats`` that prints recorded lines every --interval ms, forever."""
    recorded = tmp_path / "recorded.txt"
    recorded.write_text("\n".join([ORIN_NX, "", AGX_ORIN_DLA]) + "\n")
    script = tmp_path / "fake_tegrastats"
    script.write_text(textwrap.dedent("""\
        #!%s
        import sys, time
        args = sys.argv[1:]
        interval = int(args[args.index("--interval") + 1]) / 1000.0
        lines = open(%r).read().splitlines()
        i = 0
        while True:
            sys.stdout.write(lines[i %% len(lines)] + "\\n")
            sys.stdout.flush()
            i += 1
            time.sleep(interval)
        """ % (sys.executable, str(recorded))))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_monitor_collects_samples_from_the_subprocess(fake_tegrastats):
    mon = TegrastatsMonitor(interval_ms=20, executable=fake_tegrastats)
    with mon:
        deadline = time.monotonic() + 20
        while len(mon.snapshot()) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
    samples = mon.samples
    assert len(samples) >= 4
    assert samples[0].rails["VDD_IN"].current_mw == 5299.0
    assert samples[1].dla_active == {"NVDLA0": 1600}
    assert all(s.received is not None for s in samples)
    assert mon._proc is None  # the process it started was stopped
    report = mon.energy_per_inference(100)
    assert report is not None and report.inferences == 100 and report.mean_power_w > 5.0
    summary = mon.summary()
    assert summary["samples"] == len(samples) and summary["ram_used_mb"]["max"] == 13983


def test_monitor_keeps_reading_after_a_line_that_is_not_utf8(tmp_path):
    # a garbled line first: strict decoding killed the reader thread, and samples stopped without a word
    recorded = tmp_path / "recorded.bin"
    recorded.write_bytes(b"RAM 1\xff\xfe/2MB garbled\n" + (ORIN_NX + "\n").encode() * 3)
    script = tmp_path / "fake_tegrastats"
    script.write_text("#!%s\nimport sys, time\nsys.stdout.buffer.write(open(%r, 'rb').read())\n"
                      "sys.stdout.flush()\ntime.sleep(60)\n" % (sys.executable, str(recorded)))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    mon = TegrastatsMonitor(interval_ms=20, executable=str(script))
    with mon:
        deadline = time.monotonic() + 20
        while len(mon.snapshot()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(mon.samples) == 3 and mon.samples[0].rails["VDD_IN"].current_mw == 5299.0
    assert any("\ufffd" in line for line in mon.unparsed)  # the garbled line was read, replaced, not parsed


def test_monitor_without_tegrastats_names_the_fix(tmp_path):
    mon = TegrastatsMonitor(executable=str(tmp_path / "no_such_tegrastats"))
    with pytest.raises(DependencyError) as err:
        mon.start()
    assert "Jetson" in err.value.message
