"""The workbook in a real browser, as a user meets it: `make lab`'s JupyterLab driven by headless Chromium.

explore_rounds is opened, its parameters set to a short decode, every cell run through JupyterLab's own command,
and the round slider's handle dragged with the mouse: the drawn tree (the output image) and the round's numbers (its
printed line) must change. One paper notebook (Table 3, this machine's regime, one prompt) is run the same way and
its figure must render. Debian's `chromium` and `chromium-driver` are the browser (`.ci/run` installs them;
Selenium is pointed at them, nothing is downloaded); without them the test skips with a one-line reason. With
GRAFT_SCREENSHOTS=DIR each step's screenshot is written there (docs/browser/ holds the committed ones).
"""

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from test_jupyterlab import lab_server  # noqa: F401  (the fixture: JupyterLab on a free port, headless)

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = [pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="no Chromium / ChromeDriver: apt-get install "
                                 "chromium chromium-driver (.ci/run does)"), pytest.mark.slow(seconds=240)]
RUN_S = 420  # the bound on running a notebook's cells
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.fixture
def browser(tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000", f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_script_timeout(60)
    # a headless page never holds the focus, and JupyterLab's current notebook (what its commands act on) follows
    # the focus: the page is told it has it, as a user's window does
    driver.execute_cdp_cmd("Emulation.setFocusEmulationEnabled", {"enabled": True})
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver, name: str) -> None:
    folder = os.environ.get("GRAFT_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))


def wait_for(check, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"no {what} within {seconds:.0f} s"
        time.sleep(0.5)


def open_notebook(driver, port: int, token: str, name: str) -> None:
    driver.get(f"http://127.0.0.1:{port}/lab/tree/notebooks/{name}.ipynb?token={token}")
    wait_for(lambda: driver.execute_script(
        "const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
        "return !!(w && w.content && w.content.widgets && w.content.widgets.length && w.sessionContext"
        " && w.sessionContext.session && w.sessionContext.session.kernel);"), 60, f"{name} open with a kernel")


def run_all(driver, parameters: dict) -> None:
    """Set the parameters cell's values (`name = value` lines replaced) and run every cell through JupyterLab's own
    command; wait until every code cell ran and the kernel is idle, failing with the first error output."""
    driver.execute_async_script("""
        const [values, done] = arguments;
        const panel = window.jupyterapp.shell.currentWidget;
        const cell = panel.content.widgets.find(c => c.model.sharedModel.getSource().startsWith('# Parameters'));
        let src = cell.model.sharedModel.getSource();
        for (const [k, v] of Object.entries(values)) {
            src = src.replace(new RegExp('^' + k + ' = .*$', 'm'), k + ' = ' + v);
        }
        cell.model.sharedModel.setSource(src);
        panel.sessionContext.ready.then(() => {
            window.jupyterapp.commands.execute('notebook:run-all-cells');  // resolves when every cell ran: not awaited
            done(true);
        });
    """, {k: json.dumps(v) for k, v in parameters.items()})

    def finished():
        state = driver.execute_script("""
            const panel = window.jupyterapp.shell.currentWidget;
            const cells = panel.content.widgets.filter(c => c.model.type === 'code');
            const errors = cells.flatMap(c => c.model.outputs.toJSON()).filter(o => o.output_type === 'error');
            return {errors: errors.map(e => e.ename + ': ' + e.evalue),
                    ran: cells.every(c => c.model.executionCount !== null && c.model.executionCount > 0),
                    idle: panel.sessionContext.session.kernel.status === 'idle'};""")
        assert not state["errors"], f"a cell failed: {state['errors'][0]}"
        return state["ran"] and state["idle"]

    wait_for(finished, RUN_S, "run of every cell")


def slider_output(driver) -> tuple[str, str]:
    """(the image, the printed text) of the round slider's output area."""
    return tuple(driver.execute_script("""
        const out = [...document.querySelectorAll('.widget-interact .widget-output, .widget-interact .jp-OutputArea')]
            .pop();
        if (!out) return ['', ''];
        const img = out.querySelector('img');
        return [img ? img.src : '', out.innerText];"""))


def test_the_round_slider_redraws_the_tree_and_the_rounds_numbers(lab_server, browser, tmp_path):  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    port, token = lab_server
    before_file = (NOTEBOOKS / "explore_rounds.ipynb").read_bytes()
    open_notebook(browser, port, token, "explore_rounds")
    shot(browser, "1-explore_rounds-opened")
    run_all(browser, {"max_new_tokens": 24, "grid": "2,4,8", "results_dir": str(tmp_path / "results"),
                      "figures_dir": str(tmp_path / "figures")})
    def drawn(unlike=None):
        out = slider_output(browser)
        return out if out[0] and "round" in out[1] and out != unlike else None

    before = wait_for(drawn, 180, "round slider output")
    handle = browser.find_element(By.CSS_SELECTOR, ".widget-interact .noUi-handle")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", handle)
    shot(browser, "2-explore_rounds-slider")
    value = int(float(handle.get_attribute("aria-valuenow")))
    top = int(float(handle.get_attribute("aria-valuemax")))
    assert top > 0 and f"round {value}:" in before[1], before[1]
    # the mouse drags the handle a third of the slider's width toward its far end, as a user would
    track = browser.find_element(By.CSS_SELECTOR, ".widget-interact .noUi-target")
    step = track.size["width"] // 3 * (1 if value < top else -1)
    ActionChains(browser).click_and_hold(handle).move_by_offset(step, 0).release().perform()
    def now():
        v = int(float(handle.get_attribute("aria-valuenow")))
        return None if v == value else v

    moved = wait_for(now, 60, "slider value change")
    try:
        after = wait_for(lambda: drawn(before), 240, "redraw after the slider moved")
    finally:
        shot(browser, "3-explore_rounds-slider-moved")
        print("slider output:", slider_output(browser)[1][-2500:])
    assert after[0] != before[0], "the drawn tree did not change"
    assert after[1] != before[1] and f"round {moved}:" in after[1], (before[1], after[1])
    assert (NOTEBOOKS / "explore_rounds.ipynb").read_bytes() == before_file  # no autosave of the edited copy


def test_a_paper_notebook_renders_its_figure(lab_server, browser, tmp_path):  # noqa: F811
    port, token = lab_server
    open_notebook(browser, port, token, "table3_beta")
    run_all(browser, {"n_prompts": 1, "max_new_tokens": 8, "betas": "0,0.2", "regime_names": "machine",
                      "results_dir": str(tmp_path / "results"), "figures_dir": str(tmp_path / "figures")})
    size = wait_for(lambda: browser.execute_script("""
        const img = [...document.querySelectorAll('.jp-OutputArea-output img')].find(i => i.naturalWidth > 200);
        if (img) img.scrollIntoView({block: 'center'});
        return img ? [img.naturalWidth, img.naturalHeight] : null;"""), 30, "rendered figure")
    shot(browser, "4-table3_beta-figure")
    assert size[0] > 200 and size[1] > 100
    assert (tmp_path / "figures" / "table3_beta.png").is_file()  # the figure the notebook saved is the one drawn
